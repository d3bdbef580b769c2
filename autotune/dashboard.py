"""`autotune dashboard LOG...`: a local web page over tuning logs that updates while tuners and
sweeps append to them (Plotly Dash and Dash AG Grid: `pip install '.[dashboard]'` in autotune's checkout).

It shows each task's best so far against trials and against wall time (as `autotune report`
draws them), every measured config in a sortable, filterable table with its error kind and noisy
mark, a sweep's tasks with the trials done of those planned and the best so far per task (from
the `sweep` stamp a sweep puts on its records: autotune.distributed), the log's best against the
baselines of `autotune bench --json` files (found beside the logs, or passed with --bench), and,
per task of a model-guided run, the cost model's prediction for each measured config (the score
the search chose it by, kept in its record) against its measured speed, with their rank
correlation (Spearman's rho). Each task's best shows its share of this machine's limit (the
roofline `autotune bench` and `report` use, at the task's intensity) where it was measured on this
CPU and the machine's peak has been measured (`measure.peak`'s cache: the page never runs the
probe).

The logs are untrusted input. They are read by `autotune.records.Log` (each line validated, a
line that is no valid record skipped and counted, memory bounded per log), followed as they grow
(a log replaced or cut shorter is read again); a config outside its space or an impossible speed
is shown but never counted as a best. The page renders every string as text (React and AG Grid
escape it; the text given to Plotly is HTML-escaped), long strings are cut, and the table holds
the latest MAX_ROWS records. The server listens on 127.0.0.1 unless told otherwise.

The web stack is imported only when a page is made, so `import autotune` stays light.

Example::

    >>> from autotune.dashboard import Board                        # doctest: +SKIP
    >>> board = Board(["tune.jsonl"]); board.refresh(); board.view()["tasks"]  # doctest: +SKIP
"""
from __future__ import annotations

import html
import json
import math
import os
import stat
import sys
import threading
import time
import warnings
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from autotune.display import readable_key
from autotune.errors import AutotuneError, install_hint
from autotune.records import Log, Record, RecordError, trust
from autotune.target import cpu_model

INSTALL = install_hint("dashboard")
MAX_ROWS = 2000          # records in the configs table (the latest)
MAX_TRACES = 40          # curves drawn at once (the most recently active)
MAX_TASKS = 2000         # tasks listed
MAX_SWEEPS = 64          # sweep runs followed
MAX_PREDICTION_PLOTS = 12  # tasks whose predicted-against-measured plot is drawn (the most predicted)
MAX_TEXT = 200           # characters of a message or a config shown
MAX_BENCH_FILES, MAX_BENCH_BYTES, MAX_BASELINES = 64, 1 << 20, 16
BENCH_RESCAN_S = 5.0     # how often the folders of the logs are looked at again for bench files
                         # (and the machine's peak read again from its cache)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def require_web_stack() -> None:
    """Raise one AutotuneError naming the install command when Dash is missing."""
    try:
        import dash  # noqa: F401
        import dash_ag_grid  # noqa: F401
        import plotly  # noqa: F401
    except ImportError as e:
        raise AutotuneError(f"the dashboard needs Plotly Dash ({e.name or 'a package'} is not installed): "
                            f"{INSTALL}") from None


def _cut(text: Any, n: int = MAX_TEXT) -> str:
    s = str(text)
    return s if len(s) <= n else s[:n - 1] + "\u2026"


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


# ---- the data: logs followed, tasks summarised (no web stack) ------------------------------------

@dataclass
class _Task:
    key: str
    per: float = 1.0
    unit: str = "calls/s"
    unit_known: bool = False
    trials: int = 0
    errors: Counter = field(default_factory=Counter)
    noisy: int = 0
    retimed: int = 0
    unusable: int = 0
    best: float = math.inf          # seconds of the best usable record: re-timings of finalists first
    best_rank: tuple = (2, math.inf)
    best_config: str = ""
    best_cpu: str = ""              # the CPU model the best was measured on (its record's target)
    first: float = 0.0              # time stamps of its first and last record
    last: float = 0.0
    strategies: set = field(default_factory=set)
    logs: set = field(default_factory=set)


@dataclass
class _Sweep:
    """One sweep run (its id), as its records tell: the tasks it planned and those it logged."""
    ident: str
    log: str
    tasks: int = 0
    # task key -> [trials planned for it in the log, its trials there at the sweep's last record of it,
    # whether the sweep re-timed its finalists (the task's end)], in the order first logged
    plans: dict = field(default_factory=dict)
    first: float = 0.0
    last: float = 0.0


@dataclass
class _Group:
    """One curve: the trials of one task by one strategy in one log."""
    log: str
    task: str
    strategy: str
    records: list = field(default_factory=list)   # (record, usable)
    last: float = 0.0
    points: list | None = None                    # cached [(trial, elapsed, best speed)]


@dataclass(frozen=True)
class BenchEntry:
    path: str
    task: str
    autotune: float                       # GFLOP/s of the bench's tuned kernel
    baselines: tuple[tuple[str, float], ...]


def read_bench(path: str | os.PathLike[str]) -> BenchEntry | None:
    """The task and speeds of an `autotune bench --json` file; None for any other file (too big,
    not JSON, not of that form): bench files are untrusted input too."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BENCH_BYTES:
            return None
        with open(path, "rb") as f:
            d = json.loads(f.read(MAX_BENCH_BYTES), parse_constant=_refuse)
    except (OSError, ValueError, RecursionError):
        return None

    def speed(x: Any) -> float | None:
        g = x.get("gflops") if isinstance(x, dict) else None
        ok = isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g) and 0 <= g < 1e9
        return float(g) if ok else None
    if not (isinstance(d, dict) and isinstance(d.get("schema"), int) and isinstance(d.get("task"), str)
            and 0 < len(d["task"]) <= 512 and isinstance(d.get("baselines"), dict)):
        return None
    mine = speed(d.get("best"))
    if mine is None:
        return None
    base = []
    for name, v in list(d["baselines"].items())[:MAX_BASELINES]:
        g = speed(v)
        if isinstance(name, str) and g is not None:
            base.append((_cut(name, 64), g))
    return BenchEntry(str(path), d["task"], mine, tuple(base))


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


class Board:
    """What the page shows, kept up to date from the logs: `refresh()` reads what was appended
    (returning a version that changes with the data), `view(task)` gives plain data to draw.
    Thread-safe: the web server's threads share one board."""

    def __init__(self, logs: Sequence[str | os.PathLike[str]], bench: Sequence[str | os.PathLike[str]] = (),
                 *, scan_bench: bool = True, min_interval: float = 0.25,
                 peak_of: Callable[[str, int], Any] | None = None) -> None:
        if not logs:
            raise AutotuneError("name at least one log")
        self.paths = [Path(p) for p in logs]
        names = [p.name for p in self.paths]
        self.names = {p: (p.name if names.count(p.name) == 1 else str(p)) for p in self.paths}
        self.bench_paths = [Path(p) for p in bench]
        self.scan_bench, self.min_interval = scan_bench, min_interval
        self.peak_of = peak_of or _cached_peak  # (dtype, threads) -> this machine's Peak, or None
        self._peaks: dict[tuple[str, int], Any] = {}
        self.lock = threading.Lock()
        self._logs: dict[Path, Log] = {}
        self._held: dict[Path, int] = {}
        self._last_refresh = -math.inf
        self._bench_cache: dict[str, tuple[tuple[int, int], BenchEntry | None]] = {}
        self._last_scan = -math.inf
        self.bench: list[BenchEntry] = []
        self.skipped = 0
        self.problems: dict[str, str] = {}
        self.version = 0
        self._clear()

    def _clear(self) -> None:
        self.tasks: dict[str, _Task] = {}
        self.groups: dict[tuple[str, str, str], _Group] = {}
        self.rows: deque[dict[str, Any]] = deque(maxlen=MAX_ROWS)
        self.total = 0
        self.predicted: list[tuple[str, float, float]] = []   # (task, predicted, measured speed)
        self.sweeps: dict[tuple[str, str], _Sweep] = {}           # (log, sweep id) -> what it logged
        self._log_trials: Counter = Counter()                     # (log, task) -> trials in that log
        self._latest_sweep: dict[tuple[str, str], str] = {}       # (log, task) -> the last sweep logging it
        self._configs: dict[tuple[str, str], str | None] = {}  # config -> why it is outside its space
        self._flops: dict[str, float] = {}
        # key -> dtype, threads, intensity, bytes moved, bytes written
        self._roof: dict[str, tuple[str, int, float, float, float] | None] = {}
        self._seq = 0

    # ---- reading ---------------------------------------------------------------------------
    def refresh(self) -> int:
        """Read what the logs appended since (at most every min_interval seconds); the version."""
        with self.lock:
            now = time.monotonic()
            if now - self._last_refresh < self.min_interval:
                return self.version
            self._last_refresh = now
            changed = False
            fresh: list[tuple[Path, list[Record]]] = []
            rebuild = False
            for path in self.paths:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    new: list[Record] = []
                    try:
                        log = self._logs.get(path)
                        if log is None:
                            log = self._logs[path] = Log(path, missing_ok=True)
                            new = list(log.records)
                        else:
                            new = log.refresh()
                        if self.problems.pop(str(path), None) is not None:
                            changed = True
                    except Exception as e:  # noqa: BLE001 - a hostile file must not stop the page
                        why = _cut(e if isinstance(e, RecordError) else f"cannot read: {type(e).__name__}: {e}", 300)
                        changed |= self.problems.get(str(path)) != why
                        self.problems[str(path)] = why
                        log = self._logs.get(path)  # what it read before it stopped (a log over its limit)
                        new = log.records[self._held.get(path, 0):] if log is not None else []
                bad = sum("skipped a record" in str(w.message) for w in caught)
                if bad:
                    self.skipped += bad
                    changed = True
                log = self._logs.get(path)
                held = len(log.records) if log is not None else 0
                if held != self._held.get(path, 0) + len(new):
                    rebuild = True  # the file was replaced or cut shorter: read again from its start
                self._held[path] = held
                fresh.append((path, new))
            if rebuild:
                self._clear()
                fresh = [(p, list(log.records)) for p, log in self._logs.items()]
            for path, new in fresh:
                for r in new:
                    self._ingest(self.names[path], r)
                changed |= bool(new)
            changed |= rebuild | self._scan_bench()
            if changed:
                self.version += 1
            return self.version

    def _scan_bench(self) -> bool:
        now = time.monotonic()
        if now - self._last_scan < BENCH_RESCAN_S:
            return False
        self._last_scan = now
        self._peaks.clear()  # a bench run may have measured the peak meanwhile
        files: list[Path] = list(self.bench_paths)
        if self.scan_bench:
            for folder in dict.fromkeys(p.resolve().parent for p in self.paths):
                try:
                    found = sorted(f for f in folder.glob("*.json") if f.is_file())
                except OSError:
                    continue
                files += found[:MAX_BENCH_FILES]
        entries = []
        for f in list(dict.fromkeys(files))[:2 * MAX_BENCH_FILES]:
            try:
                st = f.stat()
            except OSError:
                continue
            ident = (st.st_mtime_ns, st.st_size)
            cached = self._bench_cache.get(str(f))
            if cached is None or cached[0] != ident:
                cached = self._bench_cache[str(f)] = (ident, read_bench(f))
            if cached[1] is not None:
                entries.append(cached[1])
        changed = entries != self.bench
        self.bench = entries
        return changed

    def _usable(self, r: Record) -> str | None:
        """None when a successful record may be a best; else why not (as `autotune report` judges:
        a config inside its template's space, a speed some machine of its ISA reaches)."""
        ck = (r.key, r.config_key())
        if ck not in self._configs:
            try:
                task = r.task()
                task.space().validate(r.config)
                self._flops.setdefault(r.key, task.flops())
                if r.key not in self._roof:
                    self._roof[r.key] = _roof_of(task)
                self._configs[ck] = None
            except Exception as e:  # noqa: BLE001 - any failure of an untrusted record: not usable
                self._configs[ck] = _cut(e)
        why = self._configs[ck]
        if why is None:
            try:
                r.check_speed(self._flops.get(r.key, 0.0))
            except RecordError as e:
                why = _cut(e)
        return why

    def _ingest(self, log: str, r: Record) -> None:
        self.total += 1
        key = r.key
        t = self.tasks.get(key)
        if t is None:
            if len(self.tasks) >= MAX_TASKS:
                return
            t = self.tasks[key] = _Task(key)
        if not t.unit_known:
            try:
                t.per, t.unit = r.task().speed_unit()
                t.unit_known = True
            except Exception:  # noqa: BLE001 - an unknown op: calls/s until a record names it
                pass
        ts = r.timestamp if 0 < r.timestamp < 1e11 else 0.0
        if ts:
            t.first = min(t.first, ts) if t.first else ts
            t.last = max(t.last, ts)
        t.logs.add(log)
        why = self._usable(r) if r.ok else None
        if r.ok and why is None and (trust(r), r.seconds) < t.best_rank:  # as best_per_task picks
            t.best_rank, t.best, t.best_config = (trust(r), r.seconds), r.seconds, r.config_key()
            t.best_cpu = str(r.target.get("cpu", "")) if r.target else ""
        t.unusable += r.ok and why is not None
        if r.retimed:
            t.retimed += 1
            trial = None
        else:
            t.trials += 1
            trial = t.trials
            if r.error:
                t.errors[r.error] += 1
            t.noisy += r.noisy
            self._log_trials[(log, key)] += 1
            strat = r.strategy or "?"
            t.strategies.add(strat)
            g = self.groups.get((log, key, strat))
            if g is None:
                g = self.groups[(log, key, strat)] = _Group(log, key, strat)
            g.records.append((r, r.ok and why is None))
            g.last, g.points = time.monotonic(), None
        pred = r.predicted  # a cost model's prediction, in records of a model-guided search
        if r.ok and why is None and not r.retimed and pred is not None and math.isfinite(pred) \
                and len(self.predicted) < 100_000:
            self.predicted.append((key, float(pred), t.per / r.seconds))
        if r.sweep is not None:
            self._sweep(log, t, r, ts)
        self._seq += 1
        self.rows.append({
            "id": str(self._seq), "log": log, "task": _cut(key), "trial": trial,
            "time_s": _sig(ts - t.first) if ts and t.first else None,
            "speed": _sig(t.per / r.seconds) if r.ok else None, "unit": t.unit,
            "ms": _sig(r.seconds * 1e3) if r.ok else None,
            "error": r.error or "", "noisy": "noisy" if r.noisy else "",
            "kind": "re-timing" if r.retimed else "trial", "strategy": _cut(r.strategy or "", 64),
            "compile_s": _sig(r.compile_seconds) if r.compile_seconds is not None else None,
            "config": _cut(r.config_key()), "note": _cut(why if why else r.message)})

    def _sweep(self, log: str, t: _Task, r: Record, ts: float) -> None:
        """Follow a sweep's stamp (validated by Record.from_json): the task's plan and progress."""
        ident, planned, size = str(r.sweep["id"]), int(r.sweep["trials"]), int(r.sweep["tasks"])
        sw = self.sweeps.get((log, ident))
        if sw is None:
            if len(self.sweeps) >= MAX_SWEEPS:
                return
            sw = self.sweeps[(log, ident)] = _Sweep(ident, log)
        sw.tasks = max(sw.tasks, size)
        if ts:
            sw.first = min(sw.first, ts) if sw.first else ts
            sw.last = max(sw.last, ts)
        if t.key not in sw.plans and len(sw.plans) >= MAX_TASKS:
            return
        plan = sw.plans.setdefault(t.key, [planned, 0, False])
        plan[0], plan[1] = planned, self._log_trials[(log, t.key)]
        plan[2] |= r.retimed
        self._latest_sweep[(log, t.key)] = ident

    def _sweep_view(self) -> list[dict[str, Any]]:
        """Each sweep: its tasks with trials done of planned, best so far and state, and a summary."""
        out = []
        for sw in sorted(self.sweeps.values(), key=lambda s: s.last, reverse=True):
            rows, done, running, trials, planned = [], 0, 0, 0, 0
            for i, (key, (plan, logged, retimed)) in enumerate(sw.plans.items()):
                t = self.tasks.get(key)
                if t is None:
                    continue
                latest = self._latest_sweep.get((sw.log, key)) == sw.ident
                n = self._log_trials[(sw.log, key)] if latest else logged
                finished = not latest or retimed or n >= plan
                state = ("done" if latest else "done (a later sweep went on)") if finished else "running"
                done += finished
                running += not finished
                trials += min(n, plan)
                planned += plan
                rows.append({"id": f"{sw.log}|{sw.ident}|{i}", "sweep": sw.ident, "task": _cut(key),
                             "trials": f"{n} of {plan}",
                             "done_pct": _sig(100.0 * min(n, plan) / plan) if plan else 100.0,
                             "best": _sig(t.per / t.best) if math.isfinite(t.best) else None, "unit": t.unit,
                             "state": state})
            waiting = max(sw.tasks - len(sw.plans), 0)
            out.append({"id": sw.ident, "log": sw.log, "tasks": sw.tasks, "done": done, "running": running,
                        "waiting": waiting, "trials": trials, "planned": planned,
                        "elapsed_s": _sig(sw.last - sw.first) if sw.first else None, "rows": rows})
        return out

    # ---- what the page draws -----------------------------------------------------------------
    def _points(self, g: _Group) -> list[tuple[int, float, float]]:
        """The best so far of a curve, by time stamp as `autotune report` draws it, only where it
        changes (and its last trial)."""
        if g.points is None:
            t = self.tasks[g.task]
            rs = sorted(g.records, key=lambda x: x[0].timestamp)
            t0 = min((r.timestamp for r, _ in rs if r.timestamp > 0), default=0.0)
            best, pts = math.inf, []
            for i, (r, ok) in enumerate(rs, 1):
                if ok and r.seconds < best:
                    best = r.seconds
                    pts.append((i, _sig(max(r.timestamp - t0, 0.0)), _sig(t.per / best)))
            if rs:
                r = rs[-1][0]
                last = (len(rs), _sig(max(r.timestamp - t0, 0.0)), pts[-1][2] if pts else 0.0)
                if not pts or pts[-1][0] != last[0]:
                    pts.append(last)
            g.points = pts
        return g.points

    def _limit_pct(self, t: _Task) -> float | None:
        """The task's best as a percentage of this machine's roofline at its intensity; None when
        the best was measured on another CPU, the task has no GFLOP/s roofline or no peak is cached."""
        roof = self._roof.get(t.key)
        if roof is None or not math.isfinite(t.best) or t.best_cpu != cpu_model():
            return None
        dtype, threads, i, nbytes, written = roof
        if (dtype, threads) not in self._peaks:
            self._peaks[(dtype, threads)] = self.peak_of(dtype, threads)
        peak = self._peaks[(dtype, threads)]
        if peak is None:
            return None
        return round(100 * peak.share(self._flops[t.key] / t.best / 1e9, i, nbytes, written), 1)

    def view(self, task: str | None = None) -> dict[str, Any]:
        """Plain data for the page: every task, the curves and configs of `task` (None: all)."""
        with self.lock:
            tasks = [{
                "id": str(i), "task": _cut(t.key), "trials": t.trials, "errors": sum(t.errors.values()),
                "error_kinds": _cut(", ".join(f"{k} {n}" for k, n in t.errors.most_common())),
                "noisy": t.noisy, "retimed": t.retimed, "not_usable": t.unusable,
                "best": _sig(t.per / t.best) if math.isfinite(t.best) else None, "unit": t.unit,
                "limit_pct": self._limit_pct(t),
                "elapsed_s": _sig(t.last - t.first) if t.first else None,
                "strategies": _cut(", ".join(sorted(t.strategies))), "logs": _cut(", ".join(sorted(t.logs))),
                "best_config": _cut(t.best_config)}
                for i, t in enumerate(sorted(self.tasks.values(), key=lambda t: t.key))]
            groups = [g for g in self.groups.values() if task is None or _cut(g.task) == task]
            groups.sort(key=lambda g: g.last, reverse=True)
            shown = groups[:MAX_TRACES]
            many_logs = len(self.paths) > 1
            curves = [{"name": _cut(f"{g.task} [{g.strategy}]" + (f" {g.log}" if many_logs else ""), 120),
                       "unit": self.tasks[g.task].unit, "points": self._points(g)}
                      for g in sorted(shown, key=lambda g: (g.task, g.strategy, g.log))]
            rows = [r for r in self.rows if task is None or r["task"] == task]
            best = {t.key: (t.per / t.best if math.isfinite(t.best) else None) for t in self.tasks.values()}
            bench = [{"task": _cut(b.task), "file": _cut(Path(b.path).name, 80), "log_best": best.get(b.task),
                      "autotune": b.autotune, "baselines": list(b.baselines)}
                     for b in self.bench if task is None or _cut(b.task) == task]
            predicted = [p for p in self.predicted if task is None or _cut(p[0]) == task][-20_000:]
            return {"version": self.version, "records": self.total, "skipped": self.skipped,
                    "problems": dict(self.problems), "logs": [self.names[p] for p in self.paths],
                    "waiting": [self.names[p] for p in self.paths if not p.exists()],
                    "tasks": tasks, "curves": curves, "curves_left_out": len(groups) - len(shown),
                    "rows": rows, "rows_held": len(self.rows), "bench": bench, "predicted": predicted,
                    "sweeps": self._sweep_view()}


def _roof_of(task: Any) -> tuple[str, int, float, float, float] | None:
    """(dtype, threads, intensity, bytes moved, bytes written) of a task with a roofline
    (measure.peak.task_roof), else None."""
    from autotune.measure.peak import task_roof
    try:
        roof = task_roof(task)
    except Exception:  # noqa: BLE001 - a task of an untrusted record without a roofline: no share
        return None
    return (task.dtype, task.threads, *roof) if roof is not None else None


def _cached_peak(dtype: str, threads: int) -> Any:
    """This machine's peak from measure.peak's cache (never measured here; a damaged cache reads as
    empty), or None. Imported on first use: `import autotune` stays light."""
    from autotune.measure.peak import cached_peak
    return cached_peak(dtype, threads)


# ---- the page (Dash) ----------------------------------------------------------------------------

def _esc(text: Any) -> str:
    """Text for Plotly, which reads a few HTML tags in names and hover text: escaped."""
    return html.escape(str(text), quote=True)


TASK_COLUMNS = [("task", "task", 330), ("trials", "trials", 90), ("best", "best (re-timed first)", 150),
                ("unit", "unit", 100), ("limit_pct", "% of limit", 110), ("errors", "errors", 90),
                ("error_kinds", "error kinds", 200), ("noisy", "noisy", 90), ("retimed", "re-timed", 100),
                ("not_usable", "not usable", 110), ("elapsed_s", "elapsed s", 110), ("strategies", "strategies", 150),
                ("logs", "logs", 150), ("best_config", "best config", 400)]
CONFIG_COLUMNS = [("log", "log", 110), ("task", "task", 300), ("trial", "trial", 85), ("time_s", "time s", 95),
                  ("speed", "speed", 100), ("unit", "unit", 95), ("ms", "ms", 95), ("error", "error", 140),
                  ("noisy", "noisy", 90), ("kind", "kind", 110), ("strategy", "strategy", 120),
                  ("compile_s", "compile s", 110), ("config", "config", 420), ("note", "note", 300)]

SWEEP_COLUMNS = [("sweep", "sweep", 150), ("task", "task", 330), ("trials", "trials done of planned", 200),
                 ("done_pct", "% done", 95), ("best", "best so far", 120), ("unit", "unit", 100),
                 ("state", "state", 220)]


def _columns(spec: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"field": f, "headerName": h, "width": w} for f, h, w in spec]


def make_app(board: Board, interval: float = 1.0):  # type: ignore[no-untyped-def]
    """The Dash app of a board: polls it every `interval` seconds and redraws what changed."""
    require_web_stack()
    import dash
    import dash_ag_grid as dag
    from dash import Input, Output, State, dcc, html as h
    from dash.exceptions import PreventUpdate

    app = dash.Dash(__name__, title="autotune dashboard", update_title=None, serve_locally=True,
                    assets_folder=str(Path(__file__).with_name("dashboard_assets_none")))
    grid_defaults = {"sortable": True, "filter": True, "resizable": True}

    def section(title: str, *children: Any, ident: str | None = None) -> Any:
        kw = {"id": ident} if ident else {}
        return h.Section([h.H2(title, style={"fontSize": "1.1em", "margin": "18px 0 6px"}), *children], **kw)

    app.layout = h.Div([
        h.H1("autotune dashboard", style={"fontSize": "1.4em", "margin": "4px 0"}),
        h.Div(id="status", style={"color": "#444"}),
        h.Div([h.Label("task ", htmlFor="task"),
               dcc.Dropdown(id="task", options=[], value=None, placeholder="all tasks", clearable=True,
                            style={"width": "520px"})], style={"display": "flex", "gap": "8px",
                                                                "alignItems": "center", "margin": "8px 0"}),
        section("Sweep: trials done of planned per task", h.Div(id="sweep-note", style={"color": "#444"}),
                dag.AgGrid(id="sweep", columnDefs=_columns(SWEEP_COLUMNS), rowData=[], defaultColDef=grid_defaults,
                           getRowId="params.data.id", style={"height": "260px"},
                           dashGridOptions={"animateRows": False, "suppressCellFocus": True}),
                ident="sweep-section"),
        section("Tasks (trials done per task)",
                dag.AgGrid(id="tasks", columnDefs=_columns(TASK_COLUMNS), rowData=[], defaultColDef=grid_defaults,
                           getRowId="params.data.id", style={"height": "220px"},
                           dashGridOptions={"animateRows": False, "suppressCellFocus": True}),
                dcc.Graph(id="progress", config={"displaylogo": False})),
        section("Best so far",
                h.Div([dcc.Graph(id="curve-trials", style={"flex": "1"}, config={"displaylogo": False}),
                       dcc.Graph(id="curve-time", style={"flex": "1"}, config={"displaylogo": False})],
                      style={"display": "flex", "gap": "8px"})),
        section("Cost model: predicted against measured", h.Div(id="predicted-note"),
                h.Div(id="predicted", style={"display": "flex", "flexWrap": "wrap", "gap": "8px"})),
        section("Measured configs",
                h.Div(id="configs-note", style={"color": "#444"}),
                dag.AgGrid(id="configs", columnDefs=_columns(CONFIG_COLUMNS), rowData=[],
                           defaultColDef=grid_defaults, getRowId="params.data.id", style={"height": "420px"},
                           dashGridOptions={"animateRows": False, "suppressCellFocus": True,
                                            "pagination": True, "paginationPageSize": 100})),
        section("Against baselines (autotune bench --json)", h.Div(id="bench-note"),
                dcc.Graph(id="bench", config={"displaylogo": False}), ident="bench-section"),
        dcc.Interval(id="tick", interval=int(max(interval, 0.2) * 1000)),
        dcc.Store(id="seen"),
    ], style={"fontFamily": "system-ui, sans-serif", "margin": "8px 16px"})

    hidden, shown = {"display": "none"}, {"display": "block"}

    @app.callback(
        Output("status", "children"), Output("task", "options"), Output("tasks", "rowData"),
        Output("progress", "figure"), Output("curve-trials", "figure"), Output("curve-time", "figure"),
        Output("configs-note", "children"), Output("configs", "rowData"),
        Output("bench-note", "children"), Output("bench", "figure"), Output("bench", "style"),
        Output("predicted-note", "children"), Output("predicted", "children"),
        Output("sweep-note", "children"), Output("sweep", "rowData"), Output("sweep-section", "style"),
        Output("seen", "data"),
        Input("tick", "n_intervals"), Input("task", "value"), State("seen", "data"))
    def update(_tick: Any, task: Any, seen: Any):  # type: ignore[no-untyped-def]
        version = board.refresh()
        task = task if isinstance(task, str) and task else None
        if seen == [version, task]:
            raise PreventUpdate
        v = board.view(task)
        return (_status(v), [{"label": t["task"], "value": t["task"]} for t in v["tasks"]], v["tasks"],
                _progress_figure(v, task), *_curve_figures(v, task), _rows_note(v), v["rows"],
                *_bench(v, hidden, shown), *_predicted(v, graph), *_sweep(v, hidden, shown), [version, task])

    def graph(figure: dict[str, Any]) -> Any:
        return dcc.Graph(figure=figure, config={"displaylogo": False, "displayModeBar": False}, style={"width": "560px"},
                         className="prediction")
    return app


def _status(v: dict[str, Any]) -> str:
    parts = [f"{v['records']} records from {', '.join(v['logs'])}", f"{len(v['tasks'])} tasks"]
    if v["skipped"]:
        parts.append(f"{v['skipped']} line{'s' * (v['skipped'] != 1)} skipped (not valid records)")
    if v["waiting"]:
        parts.append(f"waiting for {', '.join(v['waiting'])}")
    parts += [f"{_cut(p, 80)}: {why}" for p, why in v["problems"].items()]
    return "; ".join(parts) + f"; updated {time.strftime('%H:%M:%S')}"


def _rows_note(v: dict[str, Any]) -> str:
    left = v["records"] - v["rows_held"]
    return ("click a column to sort, its menu to filter; the latest "
            f"{v['rows_held']} records" + (f" ({left} older ones not listed)" if left > 0 else ""))


def _layout(title: str, x: str, y: str, revision: Any) -> dict[str, Any]:
    return {"title": {"text": _esc(title), "x": 0.02}, "xaxis": {"title": {"text": x}},
            "yaxis": {"title": {"text": y}},
            "margin": {"l": 60, "r": 20, "t": 40, "b": 50}, "height": 420, "uirevision": str(revision),
            "legend": {"font": {"size": 10}, "orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
            "template": "plotly_white"}


def _unit_label(units: Iterable[str]) -> str:
    us = sorted(set(units))
    return "best so far (" + (", ".join(us) if us else "GFLOP/s") + ")"


def _curve_figures(v: dict[str, Any], task: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    by_trial, by_time = [], []
    for c in v["curves"]:
        pts = c["points"]
        common = {"type": "scatter", "mode": "lines+markers", "name": _esc(c["name"]), "line": {"shape": "hv"},
                  "marker": {"size": 5}}
        by_trial.append({**common, "x": [p[0] for p in pts], "y": [p[2] for p in pts]})
        by_time.append({**common, "x": [p[1] for p in pts], "y": [p[2] for p in pts]})
    more = f" ({v['curves_left_out']} more not drawn: pick a task)" if v["curves_left_out"] else ""
    y = _unit_label(c["unit"] for c in v["curves"])
    return ({"data": by_trial, "layout": _layout("best so far against trials" + more, "trials", y, task)},
            {"data": by_time, "layout": _layout("best so far against wall time" + more, "wall time (s)", y, task)})


def _progress_figure(v: dict[str, Any], task: str | None) -> dict[str, Any]:
    ts = v["tasks"]
    names = [_esc(t["task"]) for t in ts]
    data = [{"type": "bar", "orientation": "h", "name": "ran", "y": names,
             "x": [t["trials"] - t["errors"] for t in ts], "marker": {"color": "#4c78a8"}},
            {"type": "bar", "orientation": "h", "name": "failed", "y": names, "x": [t["errors"] for t in ts],
             "marker": {"color": "#e45756"}}]
    left: dict[str, int] = {}  # a sweep's trials planned and not yet run, per task (its latest sweep)
    for sw in v.get("sweeps", ()):
        for r in sw["rows"]:
            if r["state"] == "running" and r["task"] not in left:
                done, _, plan = r["trials"].partition(" of ")
                left[r["task"]] = max(int(plan) - int(done), 0)
    if left:
        data.append({"type": "bar", "orientation": "h", "name": "planned (sweep)", "y": names,
                     "x": [left.get(t["task"], 0) for t in ts], "marker": {"color": "#d9d9d9"}})
    layout = _layout("trials done per task", "trials", "", "progress")
    layout.update(barmode="stack", height=max(160, 60 + 24 * len(ts)), margin={"l": 260, "r": 20, "t": 40, "b": 40})
    layout["yaxis"]["automargin"] = True
    return {"data": data, "layout": layout}


def _bench(v: dict[str, Any], hidden: Any, shown: Any) -> tuple[str, dict[str, Any], Any]:
    bs = v["bench"]
    if not bs:
        return ("no `autotune bench --json` file beside the logs (or given with --bench) for these tasks",
                {"data": [], "layout": {}}, hidden)
    names: list[str] = []
    series: dict[str, list[float | None]] = {}
    for i, b in enumerate(bs):
        names.append(_esc(f"{b['task']} ({b['file']})"))
        for k, g in [("this log's best (live)", b["log_best"]), ("bench: autotune", b["autotune"]),
                     *((f"bench: {n}", g) for n, g in b["baselines"])]:
            series.setdefault(k, [None] * len(bs))[i] = g
    data = [{"type": "bar", "name": _esc(k), "x": names, "y": ys} for k, ys in series.items()]
    layout = _layout("GFLOP/s against baselines", "", "GFLOP/s", "bench")
    layout["barmode"] = "group"
    return (f"{len(bs)} bench file(s)", {"data": data, "layout": layout}, shown)


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rho of two equally long series (ties take their mean rank); None when it is
    undefined (fewer than 3 points, or a series of one value).

    >>> rank_correlation([1, 2, 3, 4], [10, 20, 30, 25])
    0.8
    """
    if len(xs) != len(ys) or len(xs) < 3:
        return None

    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return round(sxy / math.sqrt(sxx * syy), 4)


def prediction_figures(v: dict[str, Any]) -> list[dict[str, Any]]:
    """One scatter per task with predictions (those with the most first, MAX_PREDICTION_PLOTS at
    most): the cost model's score of each measured config when the search chose it against the
    speed measured, titled with their rank correlation."""
    by_task: dict[str, list[tuple[float, float]]] = {}
    for key, pred, speed in v["predicted"]:
        by_task.setdefault(key, []).append((pred, speed))
    units = {t["task"]: t["unit"] for t in v["tasks"]}
    figures = []
    for key, ps in sorted(by_task.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_PREDICTION_PLOTS]:
        xs, ys = [p[0] for p in ps], [_sig(p[1]) for p in ps]
        rho = rank_correlation(xs, ys)
        said = f"rank correlation (Spearman) {rho:.2f}" if rho is not None else "rank correlation: too few points"
        name = readable_key(key)
        layout = _layout(f"{_cut(name, 60)}: {said}, {len(ps)} configs",
                         "predicted score (the cost model's; higher: faster)", f"measured {units.get(key, 'GFLOP/s')}",
                         f"predicted {key}")
        layout.update(height=380, showlegend=False)
        layout["title"]["font"] = {"size": 12}
        figures.append({"data": [{"type": "scatter", "mode": "markers", "x": [_sig(x) for x in xs], "y": ys,
                                  "name": _esc(_cut(key, 120)), "marker": {"size": 6, "opacity": 0.7},
                                  "hovertemplate": "predicted %{x}<br>measured %{y}<extra></extra>"}],
                        "layout": layout})
    return figures


def _predicted(v: dict[str, Any], graph: Any) -> tuple[str, list[Any]]:
    if not v["predicted"]:
        return ("no cost-model predictions in these records (only a model-guided search, `tune --cost-model`, records "
                "them)", [])
    figures = prediction_figures(v)
    n = len({p[0] for p in v["predicted"]})
    more = f" (the {len(figures)} with the most drawn)" if n > len(figures) else ""
    return (f"{len(v['predicted'])} measured configs with the model's prediction, {n} task(s){more}",
            [graph(f) for f in figures])


def _sweep(v: dict[str, Any], hidden: Any, shown: Any) -> tuple[str, list[dict[str, Any]], Any]:
    sweeps = v["sweeps"]
    if not sweeps:
        return ("", [], hidden)
    notes = []
    for sw in sweeps[:4]:
        notes.append(f"sweep {sw['id']} ({_cut(sw['log'], 60)}): {sw['done']} of {sw['tasks']} tasks done, "
                     f"{sw['running']} running, {sw['waiting']} not started; {sw['trials']} of the {sw['planned']} "
                     f"trials planned for the {len(sw['rows'])} tasks started" + (f"; {sw['elapsed_s']:.0f} s" if sw["elapsed_s"] else ""))
    rows = [r for sw in sweeps for r in sw["rows"]][:MAX_TASKS]
    return ("; ".join(notes), rows, shown)


# ---- serving --------------------------------------------------------------------------------------

class Server:
    """The dashboard's HTTP server (Werkzeug, threaded), serving in a daemon thread: `url`, `stop()`."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        import logging

        from werkzeug.serving import make_server
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per poll
        try:
            self._server = make_server(host, port, app.server, threaded=True)
        except (OSError, OverflowError) as e:
            raise AutotuneError(f"cannot listen on {host}:{port}: {e.strerror or e} (pick another --port)") from None
        self.port = self._server.server_port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, name="autotune-dashboard", daemon=True)

    def start(self) -> "Server":
        self._thread.start()
        return self

    def wait(self) -> None:
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


def serve(logs: Sequence[str | os.PathLike[str]], *, host: str = "127.0.0.1", port: int = 8050,
          bench: Sequence[str | os.PathLike[str]] = (), interval: float = 1.0) -> Server:
    """Start a dashboard over `logs` in a background thread (port 0: any free port)."""
    require_web_stack()
    for p in logs:
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            continue  # a tuner may create it later: the page waits for it
        except OSError as e:
            raise AutotuneError(f"cannot use tuning log {p}: {e.strerror}") from None
        if not stat.S_ISREG(mode):
            raise AutotuneError(f"{p} is not a regular file: a tuning log must be a file")
    for b in bench:
        if read_bench(b) is None:
            raise AutotuneError(f"{b} is not an `autotune bench --json` file")
    board = Board(logs, bench)
    board.refresh()
    return Server(make_app(board, interval), host, port).start()


def run_dashboard(logs: Sequence[str], *, host: str = "127.0.0.1", port: int = 8050, bench: Sequence[str] = (),
                  interval: float = 1.0) -> int:
    """`autotune dashboard`: serve until interrupted."""
    server = serve(logs, host=host, port=port, bench=bench, interval=interval)
    print(f"autotune dashboard on {server.url} (Ctrl-C stops it)", flush=True)
    if host not in LOCAL_HOSTS:
        print(f"warning: listening on {host}: anyone who reaches this machine can read these logs",
              file=sys.stderr, flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop()
        print("stopped", file=sys.stderr)
    return 0
