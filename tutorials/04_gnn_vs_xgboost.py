"""Train the GNN cost model on tuning logs and compare it with XGBoost on a shape it never saw.

    python tutorials/04_gnn_vs_xgboost.py           # 3 shapes x 40 measured configs
    python tutorials/04_gnn_vs_xgboost.py --fast    # 3 shapes x 4 configs, each timed briefly

Both models learn from the logs of two matmul shapes and rank the configs of a third; the
metrics are Kendall tau and the top-k score (best runtime over the best in the model's top k).
The same from the shell: `autotune train-model LOG --model gnn --out g.json` and
`autotune evaluate-model --model g.json --log HELDOUT`.
"""
import argparse
import os

import autotune
from autotune.backends import dataset_from_records
from autotune.cost_model import make_model
from autotune.cost_model.evaluate import evaluate
from autotune.records import load_records
from autotune.task import Task
from autotune.measure.local import LocalRunnerOptions
from autotune.measure.timing import TimingProtocol


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fast", action="store_true")
    p.add_argument("--log", default="gnn_tutorial.jsonl")
    args = p.parse_args()
    trials = 4 if args.fast else 40
    shapes = ["64x64x64", "96x64x48", "80x72x56"]
    options = LocalRunnerOptions()
    if args.fast:  # few configs, each timed briefly (noisier numbers: a look at the workflow, not a result)
        options = LocalRunnerOptions(protocol=TimingProtocol(repeat=3, min_repeat_ms=5))
    if not os.path.exists(args.log):
        for s in shapes:  # measure random configs of each shape (real kernels, really timed), nothing else
            autotune.tune(op="matmul", shape=s, threads=1, trials=trials, log=args.log, strategy="random", seed=1,
                          runner_options=options, presets=False, finalists=None)
    records = load_records(args.log)
    held_out = Task.create("matmul", shapes[-1], threads=1).key()
    train = [r for r in records if r.key != held_out]
    test = [r for r in records if r.key == held_out]
    train_ds = dataset_from_records(train, graphs=True)
    test_ds = dataset_from_records(test, graphs=True)
    print(f"training on {len(train_ds)} measurements of {len(set(train_ds.groups))} shapes; "
          f"testing on {len(test_ds)} of {held_out}")
    for kind in ("gnn", "xgb", "random"):
        m = make_model(kind)
        if kind == "gnn" and args.fast:
            m.epochs = 10
        m.fit(train_ds)
        med = evaluate(m, test_ds)["median"]
        print(f"{kind:>6}: Kendall tau {med['kendall_tau']:+.3f}  top-1 {med['top1']:.3f}  top-5 {med['top5']:.3f}")
    print("ok")


if __name__ == "__main__":
    main()
