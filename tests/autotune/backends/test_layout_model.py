"""The layout model and Graph Segment Training on small SYNTHETIC layout sets (seconds on a CPU):
generated files load through the port of the dataset's layout loader, the model beats random
Kendall tau on held-out graphs, a GST step runs backward through its sampled segments only, and
train / evaluate round-trip a saved model."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.backends.tpu.layout_data import generate_layout_dataset, generate_layout_graph
from autotune.backends.tpu.tpugraphs import read_layout
from tests.autotune.backends.test_tpugraphs_featurizer import LayoutPartition

torch = pytest.importorskip("torch")

from autotune.backends.tpu import layout_model as lm  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("layouts")
    generate_layout_dataset(d, train=12, valid=3, test=4, nodes=(120, 220), configs=16, seed=3)
    return d


def test_generated_files_are_synthetic_and_load_in_the_official_loader(tiny: Path) -> None:
    meta = json.loads((tiny / "SYNTHETIC.json").read_text())
    assert meta["synthetic"] is True and meta["splits"] == {"train": 12, "valid": 3, "test": 4}
    files = sorted((tiny / "train").glob("*.npz"))
    assert files and all(f.name.startswith("synthetic-") for f in files)
    part = LayoutPartition()
    for f in files[:3]:
        with np.load(f) as z:
            part.add_npz_file(f.stem, z)
    part.finalize()
    for i, f in enumerate(files[:3]):
        item, g = part.get_item(i), read_layout(f)
        np.testing.assert_array_equal(item["node_features"], g.node_feat)
        np.testing.assert_array_equal(item["config_runtimes"], g.config_runtime)
        assert item["node_config_features"].shape == g.node_config_feat.shape
        assert item["node_splits"][0] == 0 and item["node_splits"][-1] == g.node_feat.shape[0]


def test_the_planted_cost_needs_the_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same graph with the edge term switched off ranks its configs differently: the runtime
    depends on whether neighbours agree in layout, not on each node's own layout alone."""
    from autotune.backends.tpu import layout_data
    g = generate_layout_graph(200, 64, np.random.default_rng(0))
    assert g.node_config_feat.shape[1] > 10 and len(set(g.config_runtime.tolist())) > 32
    assert (g.edge_index[:, 0] > g.edge_index[:, 1]).all()            # [consumer, producer], topological
    monkeypatch.setattr(layout_data, "EDGE", 0.0)
    h = generate_layout_graph(200, 64, np.random.default_rng(0))
    np.testing.assert_array_equal(h.node_config_feat, g.node_config_feat)
    assert lm.kendall_tau(h.config_runtime, g.config_runtime) < 0.9


def test_kendall_tau_matches_the_definition() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random(12), rng.random(12)
    conc = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i in range(12) for j in range(i + 1, 12))
    assert lm.kendall_tau(x, y) == pytest.approx(conc / 66)
    assert lm.kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / np.sqrt(2 * 3))   # tau-b with a tie
    assert np.isnan(lm.kendall_tau([1, 1], [1, 2]))


def test_segments_are_bounded_and_keep_only_their_edges() -> None:
    g = generate_layout_graph(250, 4, np.random.default_rng(1))
    p = lm.prepare_graph(g, 64)
    assert p.n_segments == 4 and np.diff(p.bounds).max() <= 64
    kept = sum(len(e) for e in p.seg_edges)
    assert 0.5 * len(g.edge_index) < kept < len(g.edge_index)     # most edges are local, a few cut
    for s, e in enumerate(p.seg_edges):
        assert (e >= 0).all() and (e < p.bounds[s + 1] - p.bounds[s]).all()
    assert sum(b - a for a, b in p.seg_cfg) == len(g.node_config_ids)
    assert lm.prepare_graph(g, None).n_segments == 1
    assert [p.run_nodes(s) for s in range(4)] == np.diff(p.bounds).tolist()      # no halo: own nodes only


def test_a_halo_brings_the_cut_edges_back_as_read_only_context() -> None:
    g = generate_layout_graph(250, 6, np.random.default_rng(1))
    p, h = lm.prepare_graph(g, 64), lm.prepare_graph(g, 64, halo=1)
    assert h.n_segments == p.n_segments and (h.bounds == p.bounds).all() and h.seg_cfg == p.seg_cfg
    edges = {tuple(e) for e in g.edge_index.tolist()}
    for s in range(h.n_segments):
        a, b = int(h.bounds[s]), int(h.bounds[s + 1])
        nodes = h.seg_nodes[s]
        assert nodes[:b - a].tolist() == list(range(a, b)) and len(set(nodes.tolist())) == len(nodes)
        touching = {e for e in edges if a <= e[0] < b or a <= e[1] < b}
        kept = {(int(nodes[c]), int(nodes[q])) for c, q in h.seg_edges[s]}
        assert touching <= kept <= edges                          # every edge of the segment's nodes, cut or not
        assert h.run_nodes(s) < 64 + 40                           # the halo is the cut edges' other ends
        own_cfg = h.seg_cfg[s][1] - h.seg_cfg[s][0]
        assert (h.cfg_ids[h.seg_cfg_cols[s][:own_cfg]] == np.arange(a, b)[np.isin(np.arange(a, b), h.cfg_ids)]).all()
        assert (nodes[h.seg_cfg_pos[s]] == h.cfg_ids[h.seg_cfg_cols[s]]).all()
    assert sum(map(len, h.seg_edges)) > len(g.edge_index) > sum(map(len, p.seg_edges))
    # a halo of as many hops as the network has layers gives each segment's own nodes their full-graph
    # states: the segments' sums add up to the whole graph's
    model = lm.LayoutModel.create(hidden=8, layers=2)
    full = model.graph_sums(lm.prepare_graph(g, None), np.arange(6))
    exact = model.graph_sums(lm.prepare_graph(g, 64, halo=2), np.arange(6))
    torch.testing.assert_close(exact, full, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(model.graph_sums(p, np.arange(6)), full, rtol=1e-4, atol=1e-4)


def test_gst_backprop_runs_through_the_sampled_segments_only(tiny: Path) -> None:
    graphs = lm.load_split(tiny, "train", 40)
    g = max(graphs, key=lambda p: p.n)
    assert g.n_segments >= 4
    model = lm.LayoutModel.create(hidden=8, layers=2, segment_size=40)
    table = lm.History(torch, [g], 16)
    opt = torch.optim.Adam(model.net.parameters(), lr=1e-3)
    seen: list[tuple[int, bool]] = []
    real = model.net.segment

    def counting(x, *a):  # type: ignore[no-untyped-def]
        seen.append((int(x.shape[0]), torch.is_grad_enabled()))
        return real(x, *a)

    model.net.segment = counting
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    for step in range(3):
        seen.clear()
        loss, grad_nodes = lm._gst_step(torch, model, g, 0, table, opt, rng, gen, 2, 8, 0.5, fill="none")
        assert len(seen) == 2 and all(grad for _, grad in seen)       # two segments, nothing else run
        assert grad_nodes == sum(n for n, _ in seen) <= 2 * 40 < g.n
    filled = table.filled[0].any(1)
    assert 2 <= int(filled.sum()) <= 6                                   # only trained segments were pushed
    # fill="missing": the other segments' missing (segment, config) entries are computed without
    # gradient, one segment at a time; still only two segments run with gradient
    table = lm.History(torch, [g], 16)
    seen.clear()
    lm._gst_step(torch, model, g, 0, table, opt, rng, gen, 2, 8, 0.5, fill="missing")
    assert sum(grad for _, grad in seen) == 2 and len(seen) == g.n_segments
    assert all(n <= 40 for n, _ in seen)
    assert int(table.filled[0].any(1).sum()) == g.n_segments
    lm._gst_step(torch, model, g, 0, table, opt, rng, gen, 2, g.n_configs, 0.5, fill="missing")  # fills all
    seen.clear()
    lm._gst_step(torch, model, g, 0, table, opt, rng, gen, 2, g.n_configs, 0.5, fill="missing")  # none missing
    assert len(seen) == 2
    # fill="all" (the default): every other segment recomputed without gradient at every step
    seen.clear()
    _, grad_nodes = lm._gst_step(torch, model, g, 0, table, opt, rng, gen, 2, 8, 0.0)
    assert len(seen) == g.n_segments and sum(grad for _, grad in seen) == 2 and grad_nodes <= 2 * 40
    # the autograd graph of a segment holds that segment's nodes (and edges' messages), not the graph's
    sums = model.segment_sums(g, 0, np.arange(4))
    rows = {int(t.shape[0]) for t in _autograd_inputs(sums) if t.dim() == 3}
    assert max(rows) <= max(int(g.bounds[1]), len(g.seg_edges[0])) < g.n


def _autograd_inputs(t):  # type: ignore[no-untyped-def]
    """The tensors saved in t's autograd graph (what backward keeps alive)."""
    out, seen, stack = [], set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        for name in dir(fn):
            if name.startswith("_saved_"):
                try:
                    v = getattr(fn, name)
                except RuntimeError:
                    continue
                if isinstance(v, torch.Tensor):
                    out.append(v)
        stack += [f for f, _ in fn.next_functions]
    return out


def test_the_layout_model_beats_random_on_held_out_graphs(tiny: Path, tmp_path: Path) -> None:
    res = lm.train_layout(tiny, out=tmp_path / "m.pt", epochs=12, segment_size=None, sample_configs=16,
                          finetune_epochs=2, hidden=24, layers=2, lr=3e-3, progress=False, threads=1)
    assert res.history[-1]["loss"] < res.history[0]["loss"]
    ev = lm.evaluate_layout(tiny, tmp_path / "m.pt", progress=False, csv=tmp_path / "sub.csv")
    assert ev["labelled"] == 4 and ev["mean_tau"] > max(0.2, ev["random_mean_tau"] + 0.15), ev
    lines = (tmp_path / "sub.csv").read_text().splitlines()
    assert lines[0] == "ID,TopConfigs" and len(lines) == 5
    assert sorted(int(i) for i in lines[1].split(",")[1].split(";")) == list(range(16))


def test_gst_training_with_segments_smaller_than_the_graph(tiny: Path, tmp_path: Path) -> None:
    res = lm.train_layout(tiny, out=tmp_path / "g.pt", epochs=6, segment_size=50, sample_segments=1,
                          sample_configs=8, sed=0.5, finetune_epochs=1, hidden=16, layers=2, progress=False, threads=1)
    halo_max = max(g.run_nodes(s) for g in lm.load_split(tiny, "train", 50, 1) for s in range(g.n_segments))
    assert res.max_graph_nodes > 100 and 50 < res.max_grad_nodes <= halo_max < 100   # a segment and its halo
    assert [h["phase"] for h in res.history] == ["gst"] * 6 + ["finetune"]
    model = lm.LayoutModel.load(tmp_path / "g.pt")
    assert model.segment_size == 50 and model.halo == 1
    g = lm.load_split(tiny, "test", 50, 1)[0]
    np.testing.assert_allclose(model.predict(g), res.model.predict(g), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(g, chunk=3), model.predict(g), rtol=1e-5, atol=1e-6)


def test_without_a_halo_a_step_runs_its_segment_only(tiny: Path) -> None:
    res = lm.train_layout(tiny, epochs=2, segment_size=50, halo=0, sample_configs=8, finetune_epochs=0, hidden=8,
                          layers=1, progress=False, threads=1)
    assert 0 < res.max_grad_nodes <= 50 and res.model.halo == 0


def test_an_epoch_trains_every_segment_once(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """epoch_unit="segments" (the default): each graph's segments are all trained once per epoch, in
    consecutive steps on one sample of its configs; "graphs" (GST's code): one step per graph."""
    calls: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
    updates: list[bool] = []
    real = lm._gst_step

    def recording(torch, model, g, gi, *a, **k):  # type: ignore[no-untyped-def]
        out = real(torch, model, g, gi, *a, **k)
        calls.append((gi, tuple(k["segs"].tolist()) if k.get("segs") is not None else (), tuple(k["configs"].tolist())
                      if k.get("configs") is not None else ()))
        updates.append(k.get("update", True))
        return out

    monkeypatch.setattr(lm, "_gst_step", recording)
    graphs = lm.load_split(tiny, "train", 50, 1)
    lm.train_layout(tiny, epochs=1, segment_size=50, sample_segments=2, sample_configs=8, finetune_epochs=0,
                    hidden=8, layers=1, progress=False, threads=1)
    assert len(calls) == sum(-(-g.n_segments // 2) for g in graphs)
    for gi, g in enumerate(graphs):
        mine = [c for c in calls if c[0] == gi]
        assert sorted(s for c in mine for s in c[1]) == list(range(g.n_segments))
        assert len({c[2] for c in mine}) == 1 and len(mine[0][2]) == 8
    assert all(updates)                                     # an optimizer step per step
    # accumulate: the same pass, one optimizer step per graph (as many as full-graph training takes)
    calls.clear()
    updates.clear()
    lm.train_layout(tiny, epochs=1, segment_size=50, sample_segments=2, sample_configs=8, finetune_epochs=0,
                    hidden=8, layers=1, progress=False, threads=1, accumulate=True)
    assert len(calls) == sum(-(-g.n_segments // 2) for g in graphs) and sum(updates) == len(graphs)
    calls.clear()
    lm.train_layout(tiny, epochs=1, segment_size=50, sample_segments=2, sample_configs=8, finetune_epochs=0,
                    hidden=8, layers=1, progress=False, threads=1, epoch_unit="graphs")
    assert sorted(c[0] for c in calls) == list(range(len(graphs)))


def test_accumulated_segment_gradients_are_the_whole_graphs(tiny: Path) -> None:
    """With every other segment fresh, the gradients of a pass over a graph's segments add up to the
    gradient of the whole (segmented) graph's loss, each computed with one segment's autograd graph."""
    g = max(lm.load_split(tiny, "train", 50, 1), key=lambda p: p.n)
    assert g.n_segments >= 3
    model = lm.LayoutModel.create(hidden=8, layers=2, segment_size=50, halo=1)
    net, configs = model.net, np.arange(8)
    sums = sum(model.segment_sums(g, s, configs) for s in range(g.n_segments))
    pred = net.score(sums, torch.full((8,), float(g.n)), torch.full((8,), float(len(g.cfg_ids))))
    loss = lm.pairwise_hinge(torch, pred, torch.from_numpy(g.runtime[configs]).float())
    whole = torch.autograd.grad(loss, list(net.parameters()), allow_unused=True)
    table = lm.History(torch, [g], 16)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    rng, gen, current = np.random.default_rng(0), torch.Generator().manual_seed(0), set()
    for s in range(g.n_segments):           # the last step updates (lr 0: the weights stay), after clipping
        lm._gst_step(torch, model, g, 0, table, opt, rng, gen, 1, 8, 0.0, configs=configs, segs=np.array([s]),
                     current=current, zero=s == 0, update=s == g.n_segments - 1)
    whole = [torch.zeros_like(p) if w is None else w for p, w in zip(net.parameters(), whole)]
    clip = min(1.0, 1.0 / (float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(w) for w in whole])))
                           + 1e-6))
    for p, w in zip(net.parameters(), whole):
        torch.testing.assert_close(p.grad, w * clip, rtol=1e-4, atol=1e-6)


def test_a_model_file_from_before_halos_loads_without_one(tmp_path: Path) -> None:
    m = lm.LayoutModel.create(hidden=8, layers=1, segment_size=50, halo=1)
    m.save(tmp_path / "m.pt")
    d = torch.load(tmp_path / "m.pt", weights_only=True)
    params = json.loads(d["params"])
    del params["halo"]                                 # what version 2 wrote before --halo
    d["params"] = json.dumps(params)
    torch.save(d, tmp_path / "old.pt")
    assert lm.LayoutModel.load(tmp_path / "old.pt").halo == 0
    d["version"] = 1
    torch.save(d, tmp_path / "v1.pt")
    with pytest.raises(lm.LayoutError, match="version 1.*train it again"):
        lm.LayoutModel.load(tmp_path / "v1.pt")


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(lm.LayoutError, match="train"):
        lm.train_layout(tmp_path, progress=False)
    (tmp_path / "x.pt").write_text("nope")
    with pytest.raises(lm.LayoutError, match="not a layout model"):
        lm.LayoutModel.load(tmp_path / "x.pt")
    with pytest.raises(lm.LayoutError, match="segment_size"):
        lm.train_layout(tmp_path, segment_size=0, progress=False)
    with pytest.raises(lm.LayoutError, match="epoch_unit"):
        lm.train_layout(tmp_path, epoch_unit="steps", progress=False)
    with pytest.raises(lm.LayoutError, match="halo"):
        lm.train_layout(tmp_path, halo=-1, progress=False)


def test_a_missing_torch_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins
    real = builtins.__import__

    def no_torch(name, *a, **k):  # type: ignore[no-untyped-def]
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(lm.LayoutError, match=r"pip install '\.\[gnn\]' in autotune's checkout"):
        lm.LayoutModel.create()


def test_the_cli_generates_trains_and_evaluates_a_tiny_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main
    d, model = tmp_path / "set", tmp_path / "m.pt"
    assert main(["generate-layout", str(d), "--train", "4", "--valid", "1", "--test", "2", "--nodes", "60:90",
                 "--configs", "8"]) == 0
    assert "SYNTHETIC" in capsys.readouterr().out and (d / "SYNTHETIC.json").exists()
    assert main(["train-layout", str(d), "--out", str(model), "--epochs", "2", "--segment-size", "40",
                 "--finetune-epochs", "1", "--hidden", "8", "--layers", "1", "--no-progress", "--halo", "0",
                 "--epoch", "graphs", "--json", str(tmp_path / "train.json")]) == 0
    out = capsys.readouterr().out
    assert "best validation tau" in out and model.exists()
    summary = json.loads((tmp_path / "train.json").read_text())
    assert summary["params"]["segment_size"] == 40 and summary["max_grad_nodes"] <= 40
    assert summary["params"]["halo"] == 0 and len([h for h in summary["history"] if h["phase"] == "gst"]) == 2
    assert main(["evaluate-layout", str(d), "--model", str(model), "--no-progress", "--json",
                 str(tmp_path / "ev.json"), "--csv", str(tmp_path / "sub.csv")]) == 0
    assert "mean Kendall tau" in capsys.readouterr().out
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["labelled"] == 2 and len((tmp_path / "sub.csv").read_text().splitlines()) == 3
    # errors are one line
    assert main(["train-layout", str(tmp_path / "nothing"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error:") and "train" in err and "\n" not in err
    assert main(["train-layout", str(d), "--sed", "1.5"]) == 2
    assert "sed" in capsys.readouterr().err
    assert main(["train-layout", str(d), "--accumulate", "--epoch", "graphs", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "accumulate" in err and "\n" not in err


def test_the_cli_names_the_gnn_extra_without_torch(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins
    from autotune.cli import main
    generate_layout_dataset(tmp_path, 2, 0, 0, nodes=(20, 30), configs=4)
    real = builtins.__import__

    def no_torch(name, *a, **k):  # type: ignore[no-untyped-def]
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert main(["train-layout", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install '.[gnn]' in autotune's checkout" in err and "\n" not in err
