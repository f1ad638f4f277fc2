"""Chaos run for `skurl train --mode decoupled`: SIGKILL sim servers, collectors and
redis-server at seeded random moments while the run trains, restart Redis the way a
service manager would, and check that the run completes with the result of a run never
disturbed (scripts/kill_resume_soak.py's comparison: last checkpoint bit for bit,
metrics.jsonl records, eval.json, kept best policy) and that every restart is counted
(`process_restarts` in metrics.jsonl = the kills of sim servers and collectors).

    .venv/bin/python scripts/chaos.py --kills 8 --seed 3

Redis here has no persistence: a restart loses every key, so weights ride in the rollout
store (sync.weights_in_store) and Redis carries only the version signal. --secure runs both
runs the way docs/security.md deploys them: mutual TLS and a bearer token on every gRPC
service (certificates from scripts/dev_certs.sh, rpc.require_tls), Redis with AUTH (an ACL
user limited to skurl's keys, its password in a file). Prints one JSON
line; exit status 0 when the result matches and every restart is counted, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kill_resume_soak import SMALL, compare

TARGETS = ("sim", "collector", "redis")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Redis:
    """A redis-server without persistence on a fixed loopback port: kill() and start()."""

    workdir: Path
    password: str | None = None  # AUTH as user `skurl` (ACL: rl:* keys and channels only)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        user = "skurl@" if self.password else ""
        return f"redis://{user}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.workdir / "redis.log").open("ab")
        conf = self.workdir / "redis.conf"
        text = f'port {self.port}\nbind 127.0.0.1\nsave ""\nappendonly no\ndir {self.workdir}\n'
        if self.password:
            text += f"requirepass admin-{self.password}\nuser skurl on >{self.password} ~rl:* &rl:* +@all -@dangerous +info\n"
        conf.write_text(text)
        self.proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", str(conf)],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait(lambda: port_open(self.port), 10, "redis-server")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        _wait(lambda: not port_open(self.port), 10, "redis-server to stop")


def _wait(ready: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {timeout_s:g} s")
        time.sleep(0.05)


@dataclass
class Monkey:
    """The seeded kill schedule: after the cluster is up, wait a random gap, pick a target
    kind (each kind once first, then at random) and one of its processes, SIGKILL it (Redis is started again after a random
    outage); `kills` ends up as the list of what was killed, and when."""

    rng: random.Random
    run: Path
    iterations: int
    redis: Redis
    kills: int
    gap_s: tuple[float, float]
    outage_s: tuple[float, float] = (0.3, 2.0)
    done: list[dict[str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def cluster_file(self) -> Path:
        return self.run / "decoupled" / "cluster.json"

    def training(self) -> bool:
        """Before the last iteration: a child killed later might not be restarted (the
        launcher is stopping them), and a Redis restart not be seen, through no fault of the run."""
        metrics = self.run / "metrics.jsonl"
        return not metrics.exists() or len(metrics.read_text().splitlines()) < self.iterations - 1

    def run_schedule(self) -> None:
        while not self.stop.is_set() and not self.cluster_file.exists():
            time.sleep(0.1)
        began = time.monotonic()
        first = self.rng.sample(TARGETS, len(TARGETS))  # every kind once, in a seeded order
        while (len(self.done) < self.kills and not self.stop.wait(self.rng.uniform(*self.gap_s))
               and self.training()):
            kind = first[len(self.done)] if len(self.done) < len(first) else self.rng.choice(TARGETS)
            entry = {"at_s": round(time.monotonic() - began, 2), "target": kind}
            if kind == "redis":
                self.redis.kill()
                outage = self.rng.uniform(*self.outage_s)
                time.sleep(outage)
                self.redis.start()
                entry["outage_s"] = round(outage, 2)
            else:
                victim = self._pick(kind)
                if victim is None:
                    continue  # that process is down (being restarted): draw again
                entry["name"] = victim
            self.done.append(entry)

    def _pick(self, kind: str) -> str | None:
        cluster = json.loads(self.cluster_file.read_text())
        children = cluster["sims" if kind == "sim" else "collectors"]
        child = self.rng.choice(children)
        try:
            os.kill(child["pid"], signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            return None
        return str(child["name"])


def train(skurl: str, run: Path, mode: str, settings: list[str], timeout_s: float) -> tuple[str, float]:
    began = time.perf_counter()
    proc = subprocess.run([skurl, "train", "--run-dir", str(run), "--mode", mode, *settings],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout_s)
    took = time.perf_counter() - began
    if proc.returncode == 0:
        return "ok", took
    lines = proc.stderr.decode(errors="replace").strip().splitlines()
    return f"exit {proc.returncode}: {lines[-1] if lines else ''}", took


def iteration_gap(run: Path, gap_iterations: list[float]) -> tuple[float, float]:
    """--gap-iterations in seconds: a fast machine trains 10 small iterations in a few
    seconds, where fixed gaps of seconds would land one kill or none before the run ends."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    seconds = sorted(float(r["iteration_seconds"]) for r in rows if "iteration_seconds" in r)
    per_iteration = seconds[len(seconds) // 2] if seconds else 1.0
    low, high = (max(g * per_iteration, 0.5) for g in gap_iterations)
    return low, max(high, low)


def restarts_counted(run: Path, key: str) -> float:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return max((float(r.get(key, 0.0)) for r in rows), default=0.0)


def secure_settings(root: Path, redis: Redis) -> list[str]:
    """Certificates (scripts/dev_certs.sh), a token and the Redis password in files, and the
    settings that make every service and client use them."""
    certs = root / "certs"
    subprocess.run(["bash", str(Path(__file__).resolve().parent / "dev_certs.sh"), str(certs), "skurl"],
                   check=True, capture_output=True)
    (root / "token").write_text(secrets.token_hex(16) + "\n")
    (root / "redis-pw").write_text(f"{redis.password}\n")
    return [f"sync.redis_password_file={root / 'redis-pw'}", f"rpc.tls.cert={certs / 'skurl.pem'}",
            f"rpc.tls.key={certs / 'skurl.key'}", f"rpc.tls.ca={certs / 'ca.pem'}",
            f"rpc.token_file={root / 'token'}", "rpc.require_tls=true"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=8, help="kills during the run (fewer if it ends first)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the kill schedule")
    ap.add_argument("--gap", type=float, nargs=2, default=(1.0, 6.0), metavar=("MIN_S", "MAX_S"),
                    help="seconds between kills, drawn uniformly")
    ap.add_argument("--gap-iterations", type=float, nargs=2, default=None, metavar=("MIN", "MAX"),
                    help="instead of --gap: seconds between kills in units of the undisturbed run's "
                    "median iteration (at least 0.5 s), so the kills land within the run at any machine speed")
    ap.add_argument("--reference-mode", default="decoupled", choices=("decoupled", "colocated"),
                    help="mode of the undisturbed run (colocated trains identically, and faster)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra config override")
    ap.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temporary one)")
    ap.add_argument("--timeout", type=float, default=1200.0, help="longest run, seconds")
    ap.add_argument("--skurl", default=str(Path(sys.executable).with_name("skurl")))
    ap.add_argument("--secure", action="store_true", help="mutual TLS + token on gRPC, Redis AUTH (docs/security.md)")
    args = ap.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="skurl-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    for name in ("straight", "chaos"):
        shutil.rmtree(root / name, ignore_errors=True)
    redis = Redis(root, password=secrets.token_hex(12) if args.secure else None)
    redis.start()
    chaos_sets = ["deploy.sim_servers=2", "deploy.collectors=2", f"deploy.max_restarts={args.kills + 1}",
                  "sync.backend=redis", f"sync.redis_url={redis.url}", "sync.weights_in_store=true",
                  "sync.poll_s=0.1", "sync.timeout_s=15", "deploy.reconnect_timeout_s=60"]
    if args.secure:
        chaos_sets += secure_settings(root, redis)
    settings = [a for s in SMALL + chaos_sets + args.overrides for a in ("--set", s)]
    try:
        outcome, straight_s = train(args.skurl, root / "straight", args.reference_mode, settings, args.timeout)
        print(f"undisturbed {args.reference_mode} run: {outcome} in {straight_s:.1f}s", flush=True)
        if outcome != "ok":
            return 1
        iterations = len((root / "straight" / "metrics.jsonl").read_text().splitlines())
        gap_s = tuple(args.gap) if args.gap_iterations is None else iteration_gap(root / "straight", args.gap_iterations)
        monkey = Monkey(random.Random(args.seed), root / "chaos", iterations, redis, args.kills, gap_s)
        thread = threading.Thread(target=monkey.run_schedule, daemon=True)
        thread.start()
        try:
            outcome, chaos_s = train(args.skurl, root / "chaos", "decoupled", settings, args.timeout)
        finally:
            monkey.stop.set()
            thread.join(timeout=30)
    finally:
        redis.kill()
    print(f"chaos run: {outcome} in {chaos_s:.1f}s", flush=True)
    problems = compare(root / "straight", root / "chaos") if outcome == "ok" else [f"chaos run: {outcome}"]
    children_killed = sum(1 for k in monkey.done if k["target"] != "redis")
    redis_killed = len(monkey.done) - children_killed
    ok = outcome == "ok"
    counted = restarts_counted(root / "chaos", "process_restarts") if ok else -1.0
    redis_counted = restarts_counted(root / "chaos", "redis_restarts") if ok else -1.0
    if ok and counted < children_killed:
        problems.append(f"{children_killed} sim servers/collectors killed, {counted:g} restarts counted")
    # Two Redis outages between the learner's looks (one iteration) are one restart to it.
    if ok and redis_killed and not 1 <= redis_counted <= redis_killed:
        problems.append(f"Redis restarted {redis_killed} times, {redis_counted:g} restarts seen")
    print(json.dumps({"kills": monkey.done, "children_killed": children_killed,
                      "redis_restarts": redis_killed, "restarts_counted": counted,
                      "redis_restarts_counted": redis_counted,
                      "same_result": not problems, "problems": problems,
                      "secure": args.secure, "gap_s": [round(g, 3) for g in gap_s], "straight_s": round(straight_s, 1), "chaos_s": round(chaos_s, 1), "dir": str(root)}))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
