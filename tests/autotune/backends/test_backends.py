"""Backends: a template's backend, never its operator's name, decides its features, program
graph, the search's prior and the default runner."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from autotune.backends import Backend, backend_of, get_backend, register_backend
from autotune.backends import check_model, config_features, config_graph, dataset_from_records, feature_schema
from autotune.backends.cpu.features import feature_length
from autotune.backends.cpu.roofline import RooflineModel
from autotune.errors import AutotuneError
from autotune.task import Task
from autotune.tuning import make_runner
from autotune.measure.local import LocalRunner
from autotune.backends.tpu.runner import TpuRunner
from autotune.templates import TEMPLATES, get_template, register

CPU = Task.create("matmul", "64x48x32", threads=1)
TPU = Task.create("tpu_matmul", "1024x1024x1024", threads=1)


def a_config(task: Task):  # type: ignore[no-untyped-def]
    return task.space().sample(random.Random(0))


def test_each_template_declares_its_backend() -> None:
    assert CPU.template.backend == "cpu" and backend_of(CPU) is get_backend("cpu")
    assert TPU.template.backend == "tpu_emulator" and backend_of(TPU) is get_backend("tpu_emulator")
    assert all(t.backend == "cpu" for t in TEMPLATES.values())  # the listed operators are CPU ones
    assert not TEMPLATES.listed("tpu_matmul") and get_template("tpu_matmul") is TPU.template  # resolvable, unlisted
    assert isinstance(get_backend("cpu"), Backend) and isinstance(get_backend("tpu_emulator"), Backend)


def test_features_graphs_priors_and_runners_come_from_the_backend() -> None:
    assert config_features(CPU, a_config(CPU)).shape == (feature_length(),)
    assert config_features(TPU, a_config(TPU)).shape == (35,)
    assert config_graph(TPU, a_config(TPU)).num_nodes == 4  # the kernel's ops, not a loop nest
    assert isinstance(get_backend("cpu").prior(CPU), RooflineModel) and get_backend("tpu_emulator").prior(TPU) is None
    cpu_runner, tpu_runner = make_runner(task=CPU), make_runner(task=TPU)
    try:
        assert isinstance(cpu_runner, LocalRunner) and isinstance(tpu_runner, TpuRunner)
    finally:
        cpu_runner.close()
        tpu_runner.close()


def test_an_operator_named_like_a_tpu_kernel_is_whatever_its_backend_says() -> None:
    t = register(dataclasses.replace(get_template("matmul"), name="tpu_lookalike"), listed=False)
    task = Task.create(t, "64x48x32", threads=1)
    assert config_features(task, a_config(task)).shape == (feature_length(),)


class Doubled:
    """A backend of its own: the CPU one with every feature doubled."""
    name = "doubled"
    feature_schema = dataclasses.replace(get_backend("cpu").feature_schema, backend="doubled")

    def features(self, task, cfg):  # type: ignore[no-untyped-def]
        return 2 * get_backend("cpu").features(task, cfg)

    def graph(self, task, cfg):  # type: ignore[no-untyped-def]
        return get_backend("cpu").graph(task, cfg)

    def prior(self, task):  # type: ignore[no-untyped-def]
        return None

    def kernel_key(self, task, cfg):  # type: ignore[no-untyped-def]
        return get_backend("cpu").kernel_key(task, cfg)

    runner = "local"


def test_a_registered_backend_serves_the_templates_that_name_it() -> None:
    backend = register_backend(Doubled())
    assert get_backend("doubled") is backend and register_backend(backend) is backend
    t = register(dataclasses.replace(get_template("matmul"), name="matmul_doubled", backend="doubled"), listed=False)
    task = Task.create(t, "64x48x32", threads=1)
    cfg = a_config(task)
    np.testing.assert_array_equal(config_features(task, cfg), 2 * config_features(CPU, cfg))
    assert feature_schema(task).backend == "doubled" and dataset_from_records([]).schema is None


def test_a_model_is_used_only_on_the_features_it_was_trained_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model names the features it learned (backend, version); one trained on the CPU's loop-nest
    features is refused for a TPU task, in one line, and the name survives save and load."""
    from autotune.cost_model import load_model, make_model
    from autotune.cost_model.base import Dataset
    ds = Dataset(schema=feature_schema(CPU))
    cfgs = [a_config(CPU) for _ in range(2)] + [CPU.space().sample(__import__("random").Random(i)) for i in range(6)]
    ds.add(np.stack([config_features(CPU, c) for c in cfgs]), [1.0 + i for i in range(len(cfgs))], CPU.key())
    model = make_model("xgb")
    model.fit(ds)
    model.save(tmp_path / "m.json")
    loaded = load_model(tmp_path / "m.json")
    assert loaded.features == feature_schema(CPU)
    check_model(loaded, CPU)
    with pytest.raises(AutotuneError, match="trained on cpu features v3 .* has tpu_emulator features v1 .*retrain it"):
        check_model(loaded, TPU, where="m.json")


def test_backend_errors_name_the_problem() -> None:
    with pytest.raises(AutotuneError, match="unknown backend 'gpu'; choose one of cpu, "):
        get_backend("gpu")
    with pytest.raises(AutotuneError, match="register_backend\\(\\) takes a Backend"):
        register_backend(object())  # type: ignore[arg-type]
    clash = Doubled()
    clash.name = "cpu"  # type: ignore[misc]
    with pytest.raises(AutotuneError, match="backend named 'cpu' is already registered"):
        register_backend(clash)


def test_kernel_keys_name_the_generated_kernel() -> None:
    """Configs with equal CPU keys print the same source (and unequal keys other sources); a TPU
    config is its own kernel."""
    import itertools
    task = Task.create("matmul", "8x8x8", threads=1)
    cpu = get_backend("cpu")
    configs = list(itertools.islice(task.space().grid(), 40))
    by_key: dict = {}
    for c in configs:
        by_key.setdefault(cpu.kernel_key(task, c), set()).add(task.source(c))
    assert None not in by_key and all(len(sources) == 1 for sources in by_key.values())
    assert 1 < len(by_key) < len(configs)
    assert get_backend("tpu_emulator").kernel_key(TPU, a_config(TPU)) is None
