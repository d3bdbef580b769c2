"""The CPU backend: templates scheduled into loop nests and compiled by Numba for this CPU; its
loop-nest features (features.py, loops.py, structure.py), program graphs (graph.py), the roofline
prior (roofline.py) and the backend that ties them together (backend.py)."""
