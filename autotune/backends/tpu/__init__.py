"""The TPU emulator backend: a model of a TPU core (emulator.py), the features and op graphs of
its tile configs (features.py), and the backend that ties them to the TPU kernel templates
(autotune/backends/tpu/templates.py) and their runner (autotune.backends.tpu.runner.TpuRunner): backend.py.
"""
