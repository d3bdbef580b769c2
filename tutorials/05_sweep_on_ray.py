"""A sweep: many operators and shapes tuned over Ray into one log.

    python tutorials/05_sweep_on_ray.py           # a local Ray, started on demand
    python tutorials/05_sweep_on_ray.py --fast    # two tiny tasks, 2 trials each

To run the same sweep on a cluster, the one-line change is the address:
    run_sweep(tasks, log, address="HEAD_IP:6379")     # or: autotune sweep spec.toml --log L --address HEAD_IP:6379
Records stream into the log on this machine as they arrive; a killed sweep resumes from it, and
`autotune replay LOG` re-verifies the best kernels anywhere.
"""
import argparse

from autotune.distributed import parse_spec, run_sweep
from autotune.records import best_per_task, load_records


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fast", action="store_true")
    p.add_argument("--log", default="sweep.jsonl")
    p.add_argument("--address", default=None, help="a Ray cluster (default: a local Ray)")
    args = p.parse_args()
    spec = {
        "defaults": {"trials": 2 if args.fast else 16, "strategy": "evolutionary"},
        "task": [{"op": "matmul", "shapes": ["32x32x32"] if args.fast else ["256x256x256", "512x512x512"]},
                 {"op": "softmax" if not args.fast else "matmul", "shapes": ["16x24x8"] if args.fast else ["1024x512"]}],
    }
    tasks = parse_spec(spec)  # checked before anything starts
    states = run_sweep(tasks, args.log, address=args.address, progress=True)
    for key, st in states.items():
        print(f"{key}: {st.done} trials, {st.status}")
    best = best_per_task(load_records(args.log))
    print(f"{len(best)} tasks with a best kernel in {args.log}")
    import ray
    ray.shutdown()
    print("ok")


if __name__ == "__main__":
    main()
