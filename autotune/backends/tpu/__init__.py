"""The TPU emulator backend: a model of a TPU core (emulator.py), the features and op graphs of
its tile configs (features.py), and the backend that ties them to the TPU kernel templates
(templates/tpu) and their runner (measure.tpu_runner.TpuRunner): backend.py.
"""
