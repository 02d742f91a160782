"""bench/admission.py's figures and what it prints: one size's report, and the goals line by
line (floor, Signal's figure, ratio, goal) with the growth between the two sizes."""

from dataclasses import dataclass, field

from bench.floors import WriteFloor, growth, judged, row
from bench.history import ColdStart
from bench.throughput_floor import ThroughputFloor
from bench.window_floor import LEASE_RENEWALS, WindowFloor


@dataclass
class Figures:
    nodes: int
    cold_start: float
    rss_synced: float
    latency: float
    after_request: float
    """From the moment the last of the group's request writes had been answered."""
    observed: float
    window_verbs: dict[str, int]
    window_writes: int
    node_patches: int
    other_writes: int
    rss_after: float
    groups: int = 0
    after_request_seconds: float = 0.0
    """Throughput window from the last request write to the last Running PATCH."""
    after_request_writes: int = 0
    throughput_seconds: float = 0.0
    throughput_writes: int = 0
    throughput_lists: int = 0
    selection_ms: float = 0.0
    selection_reserved_ms: float = 0.0
    reserved: int = 0
    requested: tuple[str, ...] = ()
    window_kinds: dict[str, int] = field(default_factory=dict)
    throughput_kinds: dict[str, int] = field(default_factory=dict)
    throughput_cpu: str = ""
    backlog: bool = False
    """Goal 2's groups were all requested before their profile existed (bench/admission.py)."""
    latencies: tuple[float, ...] = ()
    """Every latency measured (``latency``: their median; one alone swung 0.46-1.00 s here)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Where the median latency's seconds went (bench/requestlog.py ``admission_phases``)."""

    @property
    def window_renewals(self) -> int:
        return self.window_kinds.get(LEASE_RENEWALS, 0)

    @property
    def throughput_renewals(self) -> int:
        return self.throughput_kinds.get(LEASE_RENEWALS, 0)


def report(figures: Figures, group: int) -> None:
    print(
        f"  {figures.nodes} Nodes: cold start {figures.cold_start:.2f}s, RSS synced {figures.rss_synced:.1f} MiB, "
        f"after {figures.rss_after:.1f} MiB"
    )
    print(
        f"  request -> Running PATCH sent {figures.latency:.3f}s (median of "
        f"{', '.join(f'{x:.3f}' for x in figures.latencies)}; {figures.after_request:.3f}s after the last "
        f"request write; observed by polling {figures.observed:.3f}s); "
        f"window: {figures.window_verbs}, writes {figures.window_writes} ({figures.node_patches} Node PATCHes), "
        f"LIST {figures.window_verbs.get('LIST', 0)}"
    )
    print(f"  the latency window's writes by kind: {figures.window_kinds}")
    if figures.phases:
        spent = ", ".join(f"{what} {seconds * 1000:.0f} ms" for what, seconds in figures.phases.items())
        print(f"  where the median latency went (from its start): {spent}")
    if figures.groups:
        print(
            f"  {figures.groups} groups of {group} at once: {figures.throughput_seconds:.2f}s, "
            f"{figures.throughput_writes} writes ({figures.throughput_writes / figures.groups:.1f} per group), "
            f"LIST {figures.throughput_lists}"
        )
        print(f"  the throughput window's writes by kind: {figures.throughput_kinds}")
        print(f"  {figures.throughput_cpu}")
    print(
        f"  pure selection of {group} of {figures.nodes} requested Nodes: median {figures.selection_ms:.2f} ms "
        f"(every Node free), {figures.selection_reserved_ms:.2f} ms (with the {figures.reserved} the bench's "
        "Runs hold, as they are)"
    )


def goals(
    full: Figures,
    small: Figures,
    floor: WriteFloor,
    whole: WindowFloor,
    cold: ColdStart,
    group: int,
    throughput: ThroughputFloor | None = None,
) -> None:
    print()
    print(
        row(
            f"1 admission latency ({full.nodes} Nodes)",
            floor.sequential,
            full.latency,
            "s",
            "<= 1.5x the sequential write floor",
        )
    )
    print(
        row(
            "1 (vs the concurrent write floor)",
            floor.concurrent,
            full.latency,
            "s",
            "(for the record)",
        )
    )
    print(
        row(
            "1 (from the last Node's request)",
            floor.sequential,
            full.after_request,
            "s",
            "(for the record: the requester's own writes excluded)",
        )
    )
    print(
        row(
            "1 (vs the request-window floor)",
            whole.median,
            full.latency,
            "s",
            f"(for the record: the same window's writes, {group} label PATCHes at once, then Signal's in a row)",
        )
    )
    print(row("1 writes in the admission window", None, full.window_writes, "", f"<= {group + 6}"))
    renewals = f"(for the record: {full.window_renewals} time-based Lease renewal(s) in the window)"
    print(row("1 (less the Lease renewals)", None, full.window_writes - full.window_renewals, "", renewals))
    if full.groups:
        rate = full.throughput_writes / full.throughput_seconds
        floor_rate = floor.writes / floor.sequential
        print(
            f"GOAL 2 throughput ({full.groups}x{group}{', backlog' if full.backlog else ''})  "
            f"floor {floor_rate:9.1f} w/s "
            f"signal {rate:9.1f} w/s ratio {rate / floor_rate:6.2f}  goal >= 0.70 of the floor's rate; "
            f"{full.throughput_writes / full.groups:.1f} writes/group (<= 70), LIST {full.throughput_lists} (0)"
        )
        per_group = (full.throughput_writes - full.throughput_renewals) / full.groups
        print(
            f"GOAL 2 (writes/group, less Lease renewals) {per_group:.1f} writes/group  (for the record: "
            f"{full.throughput_renewals} time-based Lease renewals in {full.throughput_seconds:.2f} s)"
        )
        if throughput is not None:
            same = throughput.signal_writes / throughput.seconds
            print(
                f"GOAL 2 (vs the throughput-window floor)  floor {same:9.1f} w/s signal {rate:9.1f} w/s "
                f"ratio {rate / same:6.2f}  (the same window's writes by a bare client, the requester's label "
                f"PATCHes at the same time: {throughput.seconds:.2f} s against Signal's "
                f"{full.throughput_seconds:.2f} s)"
            )
        if full.after_request_seconds > 0:
            late = full.after_request_writes / full.after_request_seconds
            print(
                f"GOAL 2 (from the last request write)   floor {floor_rate:9.1f} w/s signal {late:9.1f} w/s "
                f"ratio {late / floor_rate:6.2f}  (for the record: {full.after_request_writes} writes in "
                f"{full.after_request_seconds:.2f} s, the requester's writes over)"
            )
    history = f"{full.nodes} Nodes, {cold.runs} Runs, {cold.config_maps} evidence ConfigMaps"
    print(row(f"3 cold start ({history})", None, cold.synced, "s", "<= 5 s (caches synced)"))
    print(row("3 (to the first admission Running)", None, cold.first_admission, "s", "<= 5 s (first admission)"))
    print(row(f"3 RSS with {cold.live} live Runs", None, cold.rss_admitted, "MiB", "<= 150 MiB (100 live Runs)"))
    print(row(f"3 cold start ({full.nodes} Nodes, no Runs)", None, full.cold_start, "s", "(for the record)"))
    print(row("3 RSS synced (no Runs)", None, full.rss_synced, "MiB", "(for the record)"))
    print(row(f"4 selection ({group} of {full.nodes})", None, full.selection_ms, "ms", "<= 5 ms"))
    print(
        row(
            f"4 (with {full.reserved} of them reserved)",
            None,
            full.selection_reserved_ms,
            "ms",
            "(for the record: the bench's Runs' reservations as they are)",
        )
    )
    print()
    f = max(1, round(full.nodes / small.nodes))
    print(growth("admission latency", small.latency, full.latency, f, "s"))
    print(growth("cold start", small.cold_start, full.cold_start, f, "s"))
    print(growth("controller RSS synced", small.rss_synced, full.rss_synced, f, "MiB"))
    print(growth("selection", small.selection_ms, full.selection_ms, f, "ms"))
    if full.groups:
        small_each = small.throughput_seconds / small.groups
        print(growth("throughput window per group", small_each, full.throughput_seconds / full.groups, f, "s"))


ISSUE_47_NODES = 100_000
ISSUE_47_RUNS = 5_000
ISSUE_47_LIVE = 1_000


def issue47(full: Figures, floor: WriteFloor, cold: ColdStart, group: int) -> None:
    """Issue 47 goal 1, one line per part with PASS or MISS; below the issue's size (100,000
    Nodes, 5,000 Runs, 1,000 live Runs) each line says so: its PASS is for that size only."""
    at_size = full.nodes >= ISSUE_47_NODES and cold.runs >= ISSUE_47_RUNS and cold.config_maps >= ISSUE_47_RUNS
    size = "" if at_size else f" [below the issue's size: {full.nodes} Nodes, {cold.runs} Runs]"
    history = f"{full.nodes} Nodes, {cold.runs} Runs, {cold.config_maps} evidence"
    print()
    print(judged(f"47.1 cold start ({history})", None, cold.synced, "s", 10.0, "<= 10 s (caches synced)") + size)
    print(judged("47.1 (to the first admission Running)", None, cold.first_admission, "s", 10.0, "<= 10 s") + size)
    live = "" if cold.live >= ISSUE_47_LIVE else f" [{cold.live} live Runs, the issue's is {ISSUE_47_LIVE}]"
    print(judged(f"47.1 RSS with {cold.live} live Runs", None, cold.rss_admitted, "MiB", 600.0, "<= 600 MiB") + live)
    print(judged(f"47.1 selection ({group} of {full.nodes})", None, full.selection_ms, "ms", 5.0, "<= 5 ms") + size)
    print(judged("47.1 admission latency", floor.sequential, full.latency, "s", 1.5, "<= 1.5x the write floor") + size)
    if full.groups:
        rate = full.throughput_writes / full.throughput_seconds
        floor_rate = floor.writes / floor.sequential
        per_group = (full.throughput_writes - full.throughput_renewals) / full.groups
        ok = rate / floor_rate >= 0.7 and full.throughput_lists == 0 and per_group <= 70
        print(
            f"GOAL {'47.1 throughput (' + str(full.groups) + 'x' + str(group) + ')':<34} floor {floor_rate:9.1f} w/s "
            f"signal {rate:9.1f} w/s ratio {rate / floor_rate:6.2f}  goal >= 0.70, LIST {full.throughput_lists} (0), "
            f"{per_group:.1f} writes/group less Lease renewals (<= 70)  {'PASS' if ok else 'MISS'}{size}"
        )
