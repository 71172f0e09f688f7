"""CPU per request of the gateway against the broker behind it, HAProxy and the Python floor, in one run (issue 23).

    .venv/bin/python bench/gateway_cpu.py [--quick] [--requests 4000] [--messages 40000] [--rounds 2] \
        [--chunk 200] [--gateway-src DIR] [--pin] [--out FILE]

Paths, each a process of its own whose CPU time (user + system, all threads, from ``/proc/<pid>/task/*/schedstat``:
utime + stime in ns) is read before and after every measured segment, next to the broker's:

* ``broker``: the client straight to tansu;
* ``gateway``: a ``quotaflow gateway`` process of this tree (PLAINTEXT and SSL listeners), with the usage event log
  on, and a second one with it off; a producer quota is in force for the bench's client id (1 GB/s: metered on every
  request, never throttling);
* ``gateway@before``: the same from ``--gateway-src`` (e.g. ``git archive main src | tar -x -C /tmp/main`` then
  ``--gateway-src /tmp/main/src``), so before/after come from one run on one machine state;
* ``haproxy``: HAProxy (Debian's ``haproxy``, 2.6 on bookworm) in TCP mode, one thread, plaintext and TLS
  (``bind ... ssl crt``) frontends: the L4 reference;
* ``forwarder``: bench/l4_forwarder.py, an asyncio.Protocol on uvloop that cuts frames by their length and forwards
  them: the Python floor.

HAProxy and the forwarder do not rewrite Metadata, so each of their listeners fronts its own tansu advertising the
proxy's port (otherwise clients would reach the broker directly after bootstrap). tansu cannot serve TLS; the
upstream leg is plaintext everywhere. TLS is TLS 1.3 with a trustme certificate.

Two loads, both with 1 KB values and acks=1:

* one at a time: kafka-python, ``--requests`` single-message Produce requests, each awaited (``send().get()``,
  linger 0, one in flight): CPU per request;
* pipelined: confluent-kafka, ``--messages`` messages, max.in.flight 5 (librdkafka batches): CPU per message.

The one-at-a-time load runs on every path at once, interleaved: each path's requests go in chunks of ``--chunk``
(200), the paths taken in turn, in reverse order every other pass, so every path's figure spans the same minutes.
This host's load drifts within seconds; with each path measured in one block (``--chunk 0``, ~6 s a block) a round's
gateway / HAProxy ratio moved between 1.7x and 2.4x within one run. The pipelined load measures one path after
another (a flushed librdkafka producer per block).

Rounds alternate the order of the paths, and each round runs fresh gateway processes (a process's heap layout moves
its CPU per request by several per cent for its whole life: one process would be one draw of that). Figures are
medians over rounds; ratios are taken within the same segments (a path's CPU against its own broker's during that
path's run), and the HAProxy and before/after ratios also round by round. ``--quick`` runs 1000 requests /
10,000 messages, one round. HAProxy is installed with ``apt-get install -y haproxy`` when missing and running as
root (``make bench-setup`` does the same), else the run stops and says so.

``--pin`` gives CPU 1 to the measured proxy alone, for its segment, and CPU 0 to everything else: a probe of how
much of a proxy's cost comes from sharing two cores with its client and broker (cold caches, ~0.8 preemptions a
request). It also makes every request cross cores, which on this VM costs more than it saves (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trustme
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.processes import stop_process
from quotaflow.testing.tansu import Tansu

CLIENT_ID = "bench-cpu"
QUOTA_BYTES_S = 1e9  # producer_byte_rate in force for CLIENT_ID: metered, never throttling at these rates
VALUE = b"v" * 1024
HERE = Path(__file__).resolve().parent


@dataclass
class Target:
    """One way from the client to a broker: its bootstrap and the processes whose CPU is read."""

    name: str
    tls: bool
    bootstrap: str
    proxy_pid: int | None  # None: the broker direct
    broker_pid: int
    topic: str = ""


@dataclass
class Figures:
    proxy_us: list[float] = field(default_factory=list)
    user_us: list[float] = field(default_factory=list)  # the proxy's user time (utime: 10 ms ticks)
    broker_us: list[float] = field(default_factory=list)
    per_s: list[float] = field(default_factory=list)


class AdvertisedTansu(Tansu):
    """tansu advertising another address than its listener (the proxy in front of it)."""

    def __init__(self) -> None:
        super().__init__()
        self.advertised = self.bootstrap

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--advertised-listener-url") + 1] = f"tcp://{self.advertised}"
        return cmd


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` (``/proc/<pid>/task/*/schedstat``: ns on CPU, user + system, the same
    quantity as utime + stime without their 10 ms tick, which is too coarse for 40,000 messages at ~2 µs). Kernels
    without schedstat (no CONFIG_SCHED_INFO): utime + stime from ``/proc/<pid>/stat``."""
    if not Path(f"/proc/{pid}/schedstat").exists():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that just exited
            continue
    return total / 1e9


def user_seconds(pid: int) -> float:
    """User CPU time of ``pid`` (utime of ``/proc/<pid>/stat``, every thread, in 10 ms ticks): the part of a proxy's
    cost that is its own code (the rest is the kernel's socket work, about the same for every proxy)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` on ``cpu`` only (``--pin``: each proxy alone on a core, without the clients' and
    brokers' work in its caches or preempting it)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), {cpu})
        except OSError:  # a thread that just exited
            continue


def ensure_haproxy() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        sys.exit("HAProxy is missing: run `sudo apt-get install -y haproxy` (or `make bench-setup`)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", "haproxy"], check=True, env=env)
    return shutil.which("haproxy") or "/usr/sbin/haproxy"


def free_port() -> int:
    from quotaflow.testing.tansu import free_port as free

    return free()


@contextmanager
def haproxy(binary: str, work: Path, plain: AdvertisedTansu, tls: AdvertisedTansu, pem: Path) -> Iterator[int]:
    """HAProxy in TCP mode, one thread: a plaintext frontend to ``plain`` and a TLS one to ``tls``; yields its PID."""
    plain_port, tls_port = behind_proxy(plain, tls)
    config = work / "haproxy.cfg"
    config.write_text(f"""global
    nbthread 1
    maxconn 1000
defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s
frontend plain
    bind 127.0.0.1:{plain_port}
    default_backend plain
frontend tls
    bind 127.0.0.1:{tls_port} ssl crt {pem}
    default_backend tls
backend plain
    server s1 {plain.bootstrap}
backend tls
    server s1 {tls.bootstrap}
""")
    proc = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                            stderr=open(work / "haproxy.log", "wb"))  # noqa: SIM115
    try:
        wait_port(plain_port, proc)
        wait_port(tls_port, proc)
        yield proc.pid
    finally:
        stop_process(proc, 10)


@contextmanager
def forwarder(work: Path, plain: AdvertisedTansu, tls: AdvertisedTansu, pem: Path) -> Iterator[int]:
    """bench/l4_forwarder.py in its own process (plaintext and TLS listeners); yields its PID."""
    plain_port, tls_port = behind_proxy(plain, tls)
    proc = subprocess.Popen([sys.executable, str(HERE / "l4_forwarder.py"), "--upstream", plain.bootstrap,
                             "--upstream-tls", tls.bootstrap, "--cert", str(pem), "--port", str(plain_port),
                             "--tls-port", str(tls_port)],
                            stdout=subprocess.PIPE, stderr=open(work / "forwarder.log", "wb"))  # noqa: SIM115
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("forwarder ready"):
            raise RuntimeError(f"forwarder did not start: {line!r} {(work / 'forwarder.log').read_text()}")
        yield proc.pid
    finally:
        stop_process(proc, 10)


def behind_proxy(*brokers: AdvertisedTansu) -> list[int]:
    """Start each broker advertising a port of its own for the proxy in front of it, and return those ports.

    The brokers bind first and the proxy's ports are picked distinct from theirs: a port picked (bound and released)
    but not yet bound again is what the kernel hands out next, so a proxy started on port 0 before its broker
    could take the very port the broker was given."""
    taken = {b.port for b in brokers}
    ports: list[int] = []
    while len(ports) < len(brokers):
        port = free_port()
        if port not in taken:
            taken.add(port)
            ports.append(port)
    for broker, port in zip(brokers, ports, strict=True):
        expected = broker.port
        broker.advertised = f"127.0.0.1:{port}"
        broker.start()
        if broker.port != expected:
            raise RuntimeError(f"tansu could not bind 127.0.0.1:{expected} (now on {broker.port}); run again")
    return ports


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("HAProxy exited at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def gateway(tansu: Tansu, work: Path, name: str, pem: Path, *, event_log: bool, src: str | None) -> GatewayProcess:
    """A ``quotaflow gateway`` process (PLAINTEXT + SSL listeners) from this tree or ``src``, quota in force."""
    gw_dir = work / name
    gw_dir.mkdir()
    store = gw_dir / "quotas.db"
    admin = Admin(open_store(store))
    try:
        assert admin.alter([Alteration.of(QuotaEntity(client_id=CLIENT_ID),
                                          {"producer_byte_rate": QUOTA_BYTES_S})])[0].ok
    finally:
        admin.close()
    props = gw_dir / "gateway.properties"
    props.write_text(f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL\nssl.keystore.location={pem}\n")
    extra = ("--listen", "SSL=127.0.0.1:0", "--config", str(props))
    before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        return GatewayProcess(tansu.bootstrap, store, gw_dir, event_log=gw_dir / "events" if event_log else None,
                              extra_args=extra).start()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def ssl_port(gw: GatewayProcess) -> int:
    found = re.search(r"\bSSL=127\.0\.0\.1:(\d+)", gw.log_path.read_text())
    assert found is not None, "the gateway printed no SSL listener"
    return int(found.group(1))


def client_tls(ca: Path) -> tuple[dict[str, object], dict[str, object]]:
    """kafka-python and librdkafka settings for TLS to 127.0.0.1 with the bench's CA."""
    return ({"security_protocol": "SSL", "ssl_cafile": str(ca)},
            {"security.protocol": "ssl", "ssl.ca.location": str(ca)})


def create_topic(target: Target, ca: Path) -> None:
    config: dict[str, object] = {"bootstrap.servers": target.bootstrap}
    if target.tls:
        config.update(client_tls(ca)[1])
    target.topic = f"cpu-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)  # kept alive until the result is in
    admin.create_topics([NewTopic(target.topic, 1, 1)])[target.topic].result(30)


Measure = Callable[[Callable[[], object], int], None]
"""``measure(run, count)``: run the measured part of a load, ``count`` units of work."""


def producer_config(target: Target, ca: Path) -> dict[str, object]:
    """kafka-python's settings for awaited single-message Produce requests (one in flight, no linger)."""
    config: dict[str, object] = {"bootstrap_servers": target.bootstrap, "client_id": CLIENT_ID, "acks": 1,
                                 "linger_ms": 0, "max_in_flight_requests_per_connection": 1}
    if target.tls:
        config.update(client_tls(ca)[0])
    return config


def awaited(producer: KafkaProducer, topic: str, n: int) -> None:
    """``n`` single-message Produce requests, each awaited before the next is sent."""
    for _ in range(n):
        producer.send(topic, VALUE).get(timeout=30)


def one_at_a_time(target: Target, ca: Path, n: int, measure: Measure) -> None:
    """``n`` awaited single-message Produce requests, after a warm-up."""
    producer = KafkaProducer(**producer_config(target, ca))
    try:
        awaited(producer, target.topic, 50)
        measure(lambda: awaited(producer, target.topic, n), n)
    finally:
        producer.close(timeout=10)


def pipelined(target: Target, ca: Path, n: int, measure: Measure) -> None:
    """``n`` messages through librdkafka with 5 requests in flight."""
    config: dict[str, object] = {"bootstrap.servers": target.bootstrap, "client.id": CLIENT_ID, "acks": 1,
                                 "max.in.flight": 5, "enable.idempotence": False}
    if target.tls:
        config.update(client_tls(ca)[1])
    producer = Producer(config)
    producer.produce(target.topic, VALUE)
    producer.flush(30)

    def run() -> None:
        for _ in range(n):
            while True:
                try:
                    producer.produce(target.topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)
        if producer.flush(120):
            raise RuntimeError("messages left unsent")

    measure(run, n)


Load = Callable[[Target, Path, int, Measure], None]


@dataclass
class Reading:
    """CPU seconds of a target's proxy (all, and user) and broker, and the wall clock, at one moment."""

    proxy: float
    user: float
    broker: float
    at: float

    @staticmethod
    def of(target: Target) -> Reading:
        proxy = target.proxy_pid
        return Reading(cpu_seconds(proxy) if proxy is not None else 0.0,
                       user_seconds(proxy) if proxy is not None else 0.0,
                       cpu_seconds(target.broker_pid), time.perf_counter())


@dataclass
class Segment:
    """What a target spent on the units of work measured so far (one run, or the sum of interleaved chunks)."""

    target: Target
    proxy: float = 0.0
    user: float = 0.0
    broker: float = 0.0
    seconds: float = 0.0
    count: int = 0

    def add(self, before: Reading, after: Reading, count: int) -> None:
        self.proxy += after.proxy - before.proxy
        self.user += after.user - before.user
        self.broker += after.broker - before.broker
        self.seconds += after.at - before.at
        self.count += count

    def figures(self) -> tuple[float, float, float, float]:
        """(proxy CPU µs, proxy user CPU µs, broker CPU µs) per unit and units per second."""
        nan = float("nan")
        per = 1e6 / self.count
        direct = self.target.proxy_pid is None
        return (nan if direct else self.proxy * per, nan if direct else self.user * per, self.broker * per,
                self.count / self.seconds)


def sample(target: Target, load: Load, ca: Path, n: int) -> tuple[float, float, float, float]:
    """(proxy CPU µs, proxy user CPU µs, broker CPU µs) per unit and units per second of one segment."""
    segment = Segment(target)

    def measure(run: Callable[[], object], count: int) -> None:
        before = Reading.of(target)
        run()
        segment.add(before, Reading.of(target), count)

    load(target, ca, n, measure)
    return segment.figures()


def interleaved(targets: list[Target], ca: Path, n: int, chunk: int) -> list[tuple[float, float, float, float]]:
    """The one-at-a-time load on every target at once: ``n`` requests each, in chunks of ``chunk``, taking the
    targets in turn (in reverse order every other pass), so every path's figure spans the same minutes as every
    other's. A shared host's load drifts within seconds; a path measured in one block a minute after another meets
    another host, which moved a round's gateway / HAProxy ratio by up to 1.4x (BENCHMARKS.md)."""
    with ExitStack() as stack:
        producers = []
        for t in targets:
            producer = KafkaProducer(**producer_config(t, ca))
            stack.callback(producer.close, timeout=10)
            awaited(producer, t.topic, 50)
            producers.append(producer)
        segments = [Segment(t) for t in targets]
        for i, start in enumerate(range(0, n, chunk)):
            count = min(chunk, n - start)
            order = list(zip(targets, producers, segments, strict=True))
            for t, producer, segment in order if i % 2 == 0 else reversed(order):
                before = Reading.of(t)
                awaited(producer, t.topic, count)
                segment.add(before, Reading.of(t), count)
        return [s.figures() for s in segments]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000, help="one-at-a-time Produce requests per segment")
    ap.add_argument("--messages", type=int, default=40_000, help="pipelined messages per segment")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=200,
                    help="one at a time: every path's requests in chunks of this many, the paths taken in turn "
                         "(0: each path's requests in one block, one path after another)")
    ap.add_argument("--quick", action="store_true", help="1000 requests, 10,000 messages, one round")
    ap.add_argument("--gateway-src", default=None, help="also run the gateway from this source tree (before)")
    ap.add_argument("--only", default=None, help="comma-separated path names to run (default: all)")
    ap.add_argument("--plaintext-only", action="store_true", help="no TLS listeners")
    ap.add_argument("--one-at-a-time-only", action="store_true", help="no pipelined load")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here too")
    ap.add_argument("--pin", action="store_true",
                    help="the measured proxy alone on CPU 1; every other process on CPU 0")
    args = ap.parse_args()
    if args.pin:
        args.chunk = 0  # pinning moves the proxies between cores: one segment at a time
    if args.quick:
        args.requests, args.messages, args.rounds = 1000, 10_000, 1
    binary = ensure_haproxy()
    load_before = os.getloadavg()
    started = time.time()

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quotaflow-cpu-")))
        ca = trustme.CA()
        pem, ca_path = work / "server.pem", work / "ca.pem"
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
        ca.cert_pem.write_to_path(str(ca_path))
        broker = stack.enter_context(Tansu())
        assert broker.pid is not None
        targets = [Target("broker", False, broker.bootstrap, None, broker.pid)]
        trees: list[tuple[str, str | None]] = [("gateway", None)]
        if args.gateway_src:
            trees.append(("gateway@before", args.gateway_src))
        # a gateway process per round: one process's heap layout moves its CPU per request by up to ~10 % for its
        # whole life (bench/gateway_cold.py: ±15 % cold), so a figure from one process is one draw of that luck
        gateways: dict[str, tuple[GatewayProcess, list[Target]]] = {}

        def start_gateway(name: str, src: str | None, event_log: bool, round_: int) -> None:
            old = gateways.pop(name, None)
            if old is not None:
                old[0].stop(30)
            dir_name = f"{name.replace(' ', '-').replace('@', '-')}-{round_}"
            gw = gateway(broker, work, dir_name, pem, event_log=event_log, src=src)
            assert gw.pid is not None
            both = old[1] if old is not None else [Target(name, False, "", None, broker.pid),
                                                   Target(name, True, "", None, broker.pid)]
            both[0].bootstrap, both[1].bootstrap = gw.bootstrap, f"127.0.0.1:{ssl_port(gw)}"
            for t in both:
                t.proxy_pid = gw.pid
            gateways[name] = (gw, both)

        def stop_gateways() -> None:
            for gw, _ in gateways.values():
                gw.stop(30)

        stack.callback(stop_gateways)
        gateway_runs = [(tree if event_log else f"{tree} log off", src, event_log)
                        for tree, src in trees for event_log in (True, False)]
        for name, src, event_log in gateway_runs:
            start_gateway(name, src, event_log, 1)
            targets.extend(gateways[name][1])
        hp, hp_tls = AdvertisedTansu(), AdvertisedTansu()  # started by haproxy() (behind_proxy)
        stack.callback(hp.close)
        stack.callback(hp_tls.close)
        hp_pid = stack.enter_context(haproxy(binary, work, hp, hp_tls, pem))
        assert hp.pid is not None and hp_tls.pid is not None
        targets.append(Target("haproxy", False, hp.advertised, hp_pid, hp.pid))
        targets.append(Target("haproxy", True, hp_tls.advertised, hp_pid, hp_tls.pid))
        fw, fw_tls = AdvertisedTansu(), AdvertisedTansu()
        stack.callback(fw.close)
        stack.callback(fw_tls.close)
        fw_pid = stack.enter_context(forwarder(work, fw, fw_tls, pem))
        assert fw.pid is not None and fw_tls.pid is not None
        targets.append(Target("forwarder", False, fw.advertised, fw_pid, fw.pid))
        targets.append(Target("forwarder", True, fw_tls.advertised, fw_pid, fw_tls.pid))
        if args.only:
            wanted = set(args.only.split(","))
            targets = [t for t in targets if t.name in wanted]
        if args.plaintext_only:
            targets = [t for t in targets if not t.tls]
        if args.pin:
            for t in targets:
                pin(t.broker_pid, 0)
            pin(os.getpid(), 0)  # the clients: their threads are started later and inherit it

        for t in targets:
            print(f"creating a topic through {t.name} ({'TLS' if t.tls else 'plain'})", flush=True)
            try:
                create_topic(t, ca_path)
            except Exception as e:
                logs = "".join(f"\n--- {p.name}:\n{p.read_text(errors='replace')[-2000:]}" for p in work.glob("*.log"))
                raise RuntimeError(f"no topic through {t.name} at {t.bootstrap}: {e!r}{logs}") from e
        loads: dict[str, tuple[Load, int]] = {"one at a time": (one_at_a_time, args.requests),
                                              "pipelined": (pipelined, args.messages)}
        if args.one_at_a_time_only:
            del loads["pipelined"]
        results: dict[tuple[str, str, bool], Figures] = {}
        def record(load: str, r: int, t: Target, figures: tuple[float, float, float, float]) -> None:
            proxy, user, brok, rate = figures
            fig = results.setdefault((load, t.name, t.tls), Figures())
            fig.proxy_us.append(proxy)
            fig.user_us.append(user)
            fig.broker_us.append(brok)
            fig.per_s.append(rate)
            print(f"round {r + 1} {load:13} {t.name:22} {'TLS' if t.tls else 'plain':5} proxy "
                  f"{proxy:7.1f} µs (user {user:6.1f}) broker {brok:7.1f} µs {rate:9.0f}/s", flush=True)

        for r in range(args.rounds):
            if r:
                for name, src, event_log in gateway_runs:
                    if any(t.name == name for t in targets):
                        start_gateway(name, src, event_log, r + 1)
            ordered = targets if r % 2 == 0 else targets[::-1]
            for load, (fn, n) in loads.items():
                if fn is one_at_a_time and args.chunk:
                    for t, figures in zip(ordered, interleaved(ordered, ca_path, n, args.chunk), strict=True):
                        record(load, r, t, figures)
                    continue
                for t in ordered:
                    if args.pin:  # CPU 1 is the measured proxy's alone; every other process waits on CPU 0
                        for pid in {t.proxy_pid for t in targets if t.proxy_pid is not None}:
                            pin(pid, 1 if pid == t.proxy_pid else 0)
                    record(load, r, t, sample(t, fn, ca_path, n))

    report = render(args, results, targets, load_before, os.getloadavg(), time.time() - started)
    print(report)
    if args.out is not None:
        args.out.write_text(report)


def render(args: argparse.Namespace, results: dict[tuple[str, str, bool], Figures], targets: list[Target],
           load_before: tuple[float, float, float], load_after: tuple[float, float, float], seconds: float) -> str:
    med = statistics.median

    def get(load: str, name: str, tls: bool = False) -> Figures | None:
        return results.get((load, name, tls))

    command = "PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_cpu.py" + (" --quick" if args.quick else (
        f" --requests {args.requests} --messages {args.messages} --rounds {args.rounds}"))
    if args.chunk != 200 and not args.pin:
        command += f" --chunk {args.chunk}"
    if args.gateway_src:
        command += f" --gateway-src {args.gateway_src}"
    if args.only:
        command += f" --only {args.only}"
    if args.pin:
        command += " --pin"
    if args.plaintext_only:
        command += " --plaintext-only"
    if args.one_at_a_time_only:
        command += " --one-at-a-time-only"
    lines = [
        f"`{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other jobs; load average (1 min) "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after; {seconds:.0f} s. Python {platform.python_version()}, "
        f"OpenSSL {ssl.OPENSSL_VERSION.split()[1]}, {haproxy_version()}. Medians over {args.rounds} round(s). "
        + ("Pinned: the measured proxy alone on CPU 1, everything else on CPU 0. " if args.pin else "") +
        f"One at a time: {args.requests} kafka-python requests (µs per request); pipelined: {args.messages} "
        "confluent-kafka messages, 5 in flight (µs per message).",
        "",
        "| load | path | TLS | proxy CPU µs | of it user µs | broker CPU µs | proxy / its broker | per s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for load in ("one at a time", "pipelined"):
        for t in targets:
            fig = get(load, t.name, t.tls)
            if fig is None:
                continue
            proxy, brok = med(fig.proxy_us), med(fig.broker_us)
            of_broker = "" if t.proxy_pid is None else f"{proxy / brok:.2f}x"
            shown = "-" if t.proxy_pid is None else f"{proxy:.1f}"
            user = "-" if t.proxy_pid is None else f"{med(fig.user_us):.1f}"
            lines.append(f"| {load} | {t.name} | {'yes' if t.tls else 'no'} | {shown} | {user} | {brok:.1f} | "
                         f"{of_broker} | {med(fig.per_s):,.0f} |")
    lines += ["", "Ratios (issue 23's targets in brackets):", ""]

    def ratio(a: Figures | None, b: Figures | None, *, b_broker: bool = False) -> str:
        if a is None or b is None:
            return "n/a"
        denominator = med(b.broker_us) if b_broker else med(b.proxy_us)
        return f"**{med(a.proxy_us) / denominator:.2f}x**"

    def paired(a: Figures | None, b: Figures | None) -> str:
        """The same ratio taken round by round (both paths measured minutes apart at most): its median and range.
        The host's load drifts between rounds; a round's two figures share most of that drift."""
        if a is None or b is None or len(a.proxy_us) < 2:
            return ""
        per_round = sorted(x / y for x, y in zip(a.proxy_us, b.proxy_us, strict=True))
        return f" (round by round: median {med(per_round):.2f}x, {per_round[0]:.2f}-{per_round[-1]:.2f}x)"

    one, pipe = "one at a time", "pipelined"
    for tree in [t for t in ("gateway", "gateway@before") if get(one, t) is not None]:
        g = get(one, tree)
        lines += [
            f"* {tree}, one at a time: gateway / broker {ratio(g, g, b_broker=True)} [<= 0.8x]; gateway / HAProxy "
            f"{ratio(g, get(one, 'haproxy'))}{paired(g, get(one, 'haproxy'))} [<= 2.0x]; "
            f"gateway / Python floor {ratio(g, get(one, 'forwarder'))}; "
            f"TLS / plaintext {ratio(get(one, tree, True), g)} [<= 1.3x]; event log off / on "
            f"{ratio(get(one, tree + ' log off'), g)}.",
            f"* {tree}, pipelined: gateway / broker {ratio(get(pipe, tree), get(pipe, tree), b_broker=True)} "
            f"[<= 0.5x]; gateway / HAProxy {ratio(get(pipe, tree), get(pipe, 'haproxy'))}; TLS / plaintext "
            f"{ratio(get(pipe, tree, True), get(pipe, tree))}; event log off / on "
            f"{ratio(get(pipe, tree + ' log off'), get(pipe, tree))}.",
        ]
    if get(one, "gateway@before") is not None and get(one, "gateway") is not None:
        lines.append(f"* this tree / before, gateway CPU per request: one at a time "
                     f"{ratio(get(one, 'gateway'), get(one, 'gateway@before'))}"
                     f"{paired(get(one, 'gateway'), get(one, 'gateway@before'))}, pipelined "
                     f"{ratio(get(pipe, 'gateway'), get(pipe, 'gateway@before'))}.")
    lines.append(f"* HAProxy / Python floor, one at a time: {ratio(get(one, 'haproxy'), get(one, 'forwarder'))}.")
    return "\n".join(lines) + "\n"


def haproxy_version() -> str:
    try:
        out = subprocess.run([ensure_haproxy(), "-v"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "HAProxy ?"
    found = re.search(r"version (\S+)", out)
    return f"HAProxy {found.group(1) if found else '?'}"


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the ExitStack: every child stopped by PID
    main()
