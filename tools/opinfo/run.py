"""`make opinfo`: the OpInfo census (tests/opinfo/census.py) over PyTorch's
op_db, on the tpu device against CPU PyTorch, sample by sample.

    python tools/opinfo/run.py [--ops add,sort | --shard 2/8] [--jobs 2]

Writes benchmarks/results/opinfo-census.json (every op, dtype and sample's
outcome), then from it docs/op-coverage.md (the table) and
tests/opinfo/known_gaps.json (what tests/test_opinfo_census.py accepts). A
run over some ops merges into the existing JSON (same torch version and
sample counts), so shards can run one after the other; --fresh starts over,
--report-only just regenerates the two files.

The samples run in worker processes (this script with --worker): one that
dies or hangs is recorded against the sample it was running, and a new
worker carries on from the next sample."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "opinfo-census.json"
DOC = ROOT / "docs" / "op-coverage.md"
GAPS = ROOT / "tests" / "opinfo" / "known_gaps.json"

# A task: one op's forward samples in one dtype, or its backward samples.
Task = tuple[str, str, str]  # (op key, "forward" | "backward", dtype name)


def _import_paths() -> None:
    for path in (ROOT / "tests", HERE):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


# --- worker ----------------------------------------------------------------

def worker(tasks_file: Path, events_file: Path, timeout: float | None) -> None:
    """Runs tasks (JSON lines: op, phase, dtype, start, found), writing one
    event line per sample started and finished."""
    _import_paths()
    from opinfo import census, selection

    ops = selection.op_index()
    with open(tasks_file) as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    with open(events_file, "a", buffering=1) as events:
        def emit(**event) -> None:
            events.write(json.dumps(event) + "\n")
            events.flush()

        for task in tasks:
            op = ops[task["op"]]
            where = {"op": task["op"], "phase": task["phase"], "dtype": task["dtype"]}
            on_start = lambda i, where=where: emit(event="start", index=i, **where)  # noqa: E731
            if task["phase"] == "forward":
                outcomes = census.iter_forward(op, selection.dtype_named(task["dtype"]),
                                               start=task["start"], timeout=timeout,
                                               on_start=on_start)
            else:
                outcomes = census.iter_backward(op, start=task["start"], found=task["found"],
                                                timeout=timeout, on_start=on_start)
            for outcome in outcomes:
                emit(event="outcome", outcome=outcome.to_json(), **where)
            emit(event="done", **where)


# --- driver ----------------------------------------------------------------

def plan(keys: list[str]) -> list[Task]:
    _import_paths()
    from opinfo import selection

    ops = selection.op_index()
    tasks: list[Task] = []
    for key in keys:
        op = ops[key]
        tasks += [(key, "forward", selection.dtype_name(d)) for d in selection.census_dtypes(op)]
        if selection.has_backward(op):
            tasks.append((key, "backward", "float32"))
    return tasks


class Runner:
    """Runs a list of tasks in worker processes, restarting past crashes."""

    def __init__(self, tasks: list[Task], timeout: float | None, hang: float, log: Path,
                 progress) -> None:
        self.pending = list(tasks)
        self.timeout, self.hang, self.log, self.progress = timeout, hang, log, progress
        self.outcomes: dict[Task, list[dict]] = {t: [] for t in tasks}

    def run(self) -> None:
        while self.pending:
            self._run_worker()

    def _run_worker(self) -> None:
        with tempfile.TemporaryDirectory(prefix="opinfo-") as tmp:
            tasks_file, events_file = Path(tmp) / "tasks.jsonl", Path(tmp) / "events.jsonl"
            with open(tasks_file, "w") as f:
                for task in self.pending:
                    done = self.outcomes[task]
                    start = done[-1]["index"] + 1 if done else 0
                    found = len(done)
                    f.write(json.dumps({"op": task[0], "phase": task[1], "dtype": task[2],
                                        "start": start, "found": found}) + "\n")
            events_file.touch()
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--tasks", str(tasks_file), "--events", str(events_file)]
            if self.timeout:
                cmd += ["--timeout", str(self.timeout)]
            with open(self.log, "a") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                started: dict | None = None
                position = 0
                last_event = time.monotonic()
                hung = False
                while True:
                    rc = proc.poll()
                    with open(events_file) as f:
                        f.seek(position)
                        chunk = f.read()
                    complete = chunk[:chunk.rfind("\n") + 1]
                    position += len(complete.encode())
                    for line in complete.splitlines():
                        last_event = time.monotonic()
                        started = self._event(json.loads(line), started)
                    if rc is not None:
                        break
                    if time.monotonic() - last_event > self.hang:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        hung = True
                        break
                    time.sleep(0.2)
        if self.pending and started is not None:
            task = (started["op"], started["phase"], started["dtype"])
            why = (f"worker hung over {self.hang:g}s" if hung else
                   f"worker died ({_exit_reason(proc.returncode)})")
            self.outcomes[task].append({"index": started["index"], "status": "error",
                                        "reason": f"{why} in this sample"})
            print(f"  {task[0]} {task[1]} {task[2]}: {why} in sample {started['index']}; "
                  f"see {self.log}", flush=True)
        elif self.pending:
            # Died before starting a sample: sample generation itself, say.
            task = self.pending.pop(0)
            why = f"worker died ({_exit_reason(proc.returncode)}) outside a sample"
            self.outcomes[task].append({"index": -1, "status": "error", "reason": why})
            print(f"  {task[0]} {task[1]} {task[2]}: {why}; see {self.log}", flush=True)
            self.progress(task, self.outcomes[task])

    def _event(self, event: dict, started: dict | None) -> dict | None:
        task = (event["op"], event["phase"], event["dtype"])
        if event["event"] == "start":
            return event
        if event["event"] == "outcome":
            self.outcomes[task].append(event["outcome"])
            return None
        if event["event"] == "done":
            if task in self.pending:
                self.pending.remove(task)
            self.progress(task, self.outcomes[task])
        return started


def _exit_reason(rc: int) -> str:
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def run_tasks(tasks: list[Task], jobs: int, timeout: float | None, hang: float,
              log: Path) -> dict[Task, list[dict]]:
    total = len(tasks)
    counter = {"done": 0}
    lock = threading.Lock()
    t0 = time.monotonic()

    def progress(task: Task, outcomes: list[dict]) -> None:
        with lock:
            counter["done"] += 1
            bad = [o for o in outcomes if o["status"] not in ("ok", "cpu-error-ok")]
            note = f"  {len(bad)} not ok" if bad else ""
            print(f"[{counter['done']}/{total} {time.monotonic() - t0:.0f}s] {task[0]} {task[1]} "
                  f"{task[2]}: {len(outcomes)} samples{note}", flush=True)

    runners = [Runner(tasks[i::jobs], timeout, hang, log, progress) for i in range(jobs)]
    threads = [threading.Thread(target=r.run) for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results: dict[Task, list[dict]] = {}
    for runner in runners:
        results.update(runner.outcomes)
    return results


def load(path: Path) -> dict:
    if path.is_file():
        with open(path) as f:
            return json.load(f)
    return {}


def write_json(data: dict, path: Path) -> None:
    """Indented, except one line per op: smaller, and diffs stay per op."""
    ops = data["ops"]
    head = json.dumps({k: v for k, v in data.items() if k != "ops"}, indent=1)[:-2]
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in ops.items())
    text = f'{head},\n "ops": {{\n{body}\n }}\n}}\n'
    json.loads(text)
    path.write_text(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names (name.variant)")
    ap.add_argument("--shard", default="", help="i/n: every n-th op from the i-th (0-based)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per sample (0: none)")
    ap.add_argument("--hang", type=float, default=600,
                    help="kill a worker that reports nothing for this long")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--fresh", action="store_true", help="do not merge into the existing JSON")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--doc", default=str(DOC))
    ap.add_argument("--gaps", default=str(GAPS))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tasks", help=argparse.SUPPRESS)
    ap.add_argument("--events", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(Path(args.tasks), Path(args.events), args.timeout or None)
        return

    _import_paths()
    import report
    from opinfo import selection

    out = Path(args.out)
    if not args.report_only:
        import torch

        keys = list(selection.census_ops())
        if args.ops:
            wanted = [k for k in args.ops.split(",") if k]
            index = selection.op_index()
            unknown = [k for k in wanted if k not in index]
            if unknown:
                raise SystemExit(f"not in op_db: {', '.join(unknown)}")
            keys = [k for k in wanted if k in keys] + [k for k in wanted if k not in keys]
        if args.shard:
            i, n = (int(x) for x in args.shard.split("/"))
            keys = keys[i::n]
        meta = {"torch": torch.__version__, "samples": selection.SAMPLES,
                "backward_samples": selection.BACKWARD_SAMPLES,
                "eager": os.environ.get("TORCH_PJRT_EAGER", "strict") or "strict"}
        data = {} if args.fresh else load(out)
        if any(data.get(k) != v for k, v in meta.items()):
            if data:
                print(f"{out.name}: different torch version or settings; starting over")
            data = {}
        tasks = plan(keys)
        print(f"{len(keys)} ops, {len(tasks)} (op, dtype) tasks, {args.jobs} worker(s)", flush=True)
        log = ROOT / "build" / "opinfo" / "workers.log"  # the workers' own output
        log.parent.mkdir(parents=True, exist_ok=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        started = time.monotonic()
        started_at = time.time()
        results = run_tasks(tasks, max(1, args.jobs), args.timeout or None, args.hang, log)
        ops = data.get("ops", {})
        for key, phase, dtype in tasks:  # in op_db's and census_dtypes' order
            entry = ops[key] if key in ops and ops[key].get("run") == started_at else \
                {"run": started_at, "forward": {}}
            if phase == "forward":
                entry["forward"][dtype] = results[(key, phase, dtype)]
            else:
                entry["backward"] = results[(key, phase, dtype)]
            ops[key] = entry
        for entry in ops.values():
            entry.pop("run", None)
        data.update(meta)
        data["date"] = datetime.date.today().isoformat()
        data["last_run"] = {"ops": len(keys), "tasks": len(tasks), "jobs": max(1, args.jobs),
                            "seconds": round(time.monotonic() - started, 1)}
        data["ops"] = {k: ops[k] for k in selection.op_index() if k in ops}
        data["census_ops"] = len(selection.census_ops())
        data["excluded"] = selection.excluded_ops()
        data["skipped_ops"] = {k: r for k, op in selection.census_ops().items()
                               if (r := selection.op_skip_reason(op))}
        write_json(data, out)
        print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    data = load(out)
    if not data:
        raise SystemExit(f"no census at {out}: run without --report-only first")
    report.write_doc(data, Path(args.doc))
    report.write_gaps(data, Path(args.gaps))
    print(report.summary_line(data))


if __name__ == "__main__":
    main()
