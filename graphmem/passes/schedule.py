"""Find a topological order with a lower live-memory peak than the model's own order.

The peak depends on the order the nodes run in (DESIGN: "the peak is always stated with its
schedule"). The searches work on `passes/memory_model.MemoryModel` (integers, any order's
peak is exactly the peak `analyze_liveness` gives for it):

1. Greedy list scheduling: at every step run the ready node that leaves the least memory live
   after it (bytes it allocates minus bytes freed because it was their last user), ties by
   model order. Keys live in a heap and change incrementally (a node's key changes only when
   it becomes the last pending user of a buffer), so a pass is O((nodes + edges) log nodes).
   Two restarts with other keys (smallest working set first; freeing nodes first, then the
   branch made ready last) cover cases where one key is myopic. The model order is always a
   candidate, so the best order found is never worse than the model's. A pass tracks its
   live bytes as it runs and stops at the first step that reaches the best peak so far: only
   a strictly lower peak replaces the best, so its order could not (`greedy_search`).
2. Exact search for small graphs (<= EXACT_MAX_NODES nodes): a bottleneck shortest path over
   the sets of nodes already run (down-sets of the DAG: the memory live after a set does not
   depend on the order that ran it), best-first by the peak so far, pruned at the best peak
   known. It proves the optimum, or gives up after EXACT_MAX_STATES states. Nodes that can
   only add memory and that nothing waits for (an exporter's copies of weights) run last,
   outside the search (passes/exact_schedule.py).
3. For larger graphs, windowed exact search around the peak (`refine_around_peak`): the
   nodes of a window of consecutive steps at the peak are re-ordered optimally by the same
   search, everything else held fixed; repeated while the peak window improves. This finds
   what one-step greedy keys cannot see, e.g. that an Inception block's max-pool branch
   should run first, while the input is the only other live tensor.

An order whose peak meets the lower bound (residents + the largest single node's inputs and
outputs) is optimal without search. With free dims the order is chosen with them at a probe
value (PROBE_DIM_VALUE; the report says so) and its peak then recomputed symbolically.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.passes.exact_schedule import EXACT_MAX_STATES, exact_order, refine_around_peak
from graphmem.passes.liveness import LivenessResult
from graphmem.passes.memory_model import (
    MemoryModel,
    build_memory_model,
    is_topological,
    order_peak,
    plan_dims,
    symbolic_order_peak,
)

if TYPE_CHECKING:  # networkx takes 0.1 s to import: loaded where a model needs it (rarely)
    import networkx as nx

EXACT_MAX_NODES = 20
MOVED_SHOWN = 8


@dataclass(frozen=True)
class MovedNode:
    name: str
    model_step: int
    best_step: int


@dataclass(frozen=True)
class ScheduleResult:
    """The best order found, with its peak next to the model order's and the lower bound."""

    order: tuple[str, ...]  # node names, best order found
    method: str  # "exact" | "windowed exact" | "greedy" | "model order" | "topological sort"
    proven_optimal: bool  # no order has a lower peak (at the probe dims, if any are free)
    proof: str | None  # "lower bound" (the peak meets it) | "exact search" | None
    model_order_peak_bytes: SymInt
    best_order_peak_bytes: SymInt  # at the probe, if dims are free (see candidates)
    best_order_peak_candidates: tuple[SymInt, ...]
    lower_bound_bytes: SymInt
    moved: tuple[MovedNode, ...]  # the first few nodes the best order moves
    moved_count: int  # nodes outside a longest run kept in model order
    chosen_at_dims: dict[str, int]  # free dims at their probe value ({} when all are bound)


@dataclass(frozen=True)
class OrderSearch:
    """The integer result of a search on a MemoryModel (node indices)."""

    order: tuple[int, ...]
    peak_bytes: int
    method: str
    proven_optimal: bool
    proof: str | None = None


def find_schedule(graph: Graph, sizes: Mapping[str, SymInt | None],
                  liveness: LivenessResult, bound: Mapping[str, int],
                  model: MemoryModel | None = None) -> ScheduleResult:
    """Search a better order for `graph`; `liveness` is the model order's (same sizes).

    `model` is the graph's MemoryModel at `plan_dims(graph, bound)` if already built.
    """
    model = model or build_memory_model(graph, sizes, plan_dims(graph, bound))
    dims = model.dims
    search = best_order(model)
    if search.method == "model order":
        candidates = liveness.peak_candidates
        peak = liveness.peak_bytes
    elif all(size is None or size.is_constant  # each distinct size object once
             for size in dict(zip(map(id, sizes.values()), sizes.values(), strict=True)).values()):
        candidates = (SymInt.const(search.peak_bytes),)
        peak = candidates[0]
    else:
        peak, candidates = symbolic_order_peak(model, search.order, sizes,
                                               liveness.resident_bytes, dims)
    moved, moved_count = moved_nodes(search.order)
    names = model.node_names
    return ScheduleResult(
        order=tuple(map(names.__getitem__, search.order)),
        method=search.method,
        proven_optimal=search.proven_optimal,
        proof=search.proof,
        model_order_peak_bytes=liveness.peak_bytes,
        best_order_peak_bytes=peak,
        best_order_peak_candidates=tuple(candidates),
        lower_bound_bytes=liveness.lower_bound_bytes,
        moved=tuple(MovedNode(names[n], n, step) for n, step in moved[:MOVED_SHOWN]),
        moved_count=moved_count,
        chosen_at_dims={k: v for k, v in dims.items() if k not in bound},
    )


def best_order(model: MemoryModel, exact_max_nodes: int = EXACT_MAX_NODES,
               max_states: int = EXACT_MAX_STATES) -> OrderSearch:
    """The lowest-peak order found: exact when the graph is small, else the best greedy."""
    start, method = _starting_order(model)
    # the model order's sweep is the model's own (the arena plans that order too)
    start_peak = (max(model.model_order_sweep[1], default=-1) if method == "model order"
                  else order_peak(model, start)[0])
    best = OrderSearch(start, start_peak, method, False)
    if best.peak_bytes <= model.lower_bound_bytes:
        return OrderSearch(best.order, best.peak_bytes, method, True, "lower bound")
    # where no order can end below the start's peak, no search can find a lower one: the
    # searches are skipped, the answer is the same (10^5 graph outputs, all live at the end)
    searching = best.peak_bytes > last_step_floor(model)
    shared = greedy_start(model) if searching else None
    swept = None  # the best greedy order's live bytes during and after each step
    for key in GREEDY_KEYS if searching else ():
        # a pass stops once a step reaches the best peak: its order could not replace it
        profile: tuple[list[int], list[int]] = ([], [])
        greedy = greedy_search(model, key, below=best.peak_bytes, start=shared,
                               profile=profile)
        if greedy is not None:
            best = OrderSearch(greedy[0], greedy[1], "greedy", False)
            swept = profile
    if best.peak_bytes <= model.lower_bound_bytes:
        return OrderSearch(best.order, best.peak_bytes, best.method, True, "lower bound")
    if model.node_count <= exact_max_nodes:
        exact = exact_order(model, best.peak_bytes, max_states)
        if exact is not None:
            found, peak = exact
            if found is not None:
                return OrderSearch(found, peak, "exact", True, "exact search")
            return OrderSearch(best.order, best.peak_bytes, best.method, True, "exact search")
    if not searching:
        return best
    order, peak = refine_around_peak(model, best.order, profile=swept)
    if peak < best.peak_bytes:
        meets = peak <= model.lower_bound_bytes
        return OrderSearch(order, peak, "windowed exact", meets, "lower bound" if meets else None)
    return best


def last_step_floor(model: MemoryModel) -> int:
    """Bytes live during the last step of any order, at least: the node run last is one no
    other node waits for, and while it runs every graph output (never freed) and every buffer
    it keeps alive are allocated and not yet freed; the least of that over those nodes."""
    sizes, pinned = model.buffer_bytes, model.pinned
    outputs = sum(size for size, kept in zip(sizes, pinned, strict=True) if kept)
    waited_on = bytearray(model.node_count)
    for before in model.predecessors:
        for node in before:
            waited_on[node] = 1
    ends = (sum(sizes[b] for b in model.uses[node] if not pinned[b])
            for node, waited in enumerate(waited_on) if not waited)
    return model.resident_bytes + outputs + min(ends, default=0)


def _starting_order(model: MemoryModel) -> tuple[tuple[int, ...], str]:
    """The model order, or a topological sort where the model's order is not one."""
    model_order = tuple(range(model.node_count))
    if is_topological(model, model_order):
        return model_order, "model order"
    import networkx as nx

    dependencies = dependency_graph(model)
    if not nx.is_directed_acyclic_graph(dependencies):
        cycle = [model.node_names[a] for a, _ in nx.find_cycle(dependencies)]
        raise ValueError(f"the graph has a cycle ({' -> '.join(cycle)}): no order runs it")
    return tuple(nx.lexicographical_topological_sort(dependencies)), "topological sort"


# ----- greedy list scheduling -----------------------------------------------------------------

# A key ranks a ready node: (bytes live after it runs minus before, bytes it allocates, model
# index, made ready at step) -> sortable tuple; smaller runs first.
GreedyKey = Callable[[int, int, int, int], tuple[int, ...]]


def _least_live_after(delta: int, alloc: int, index: int, ready_at: int) -> tuple[int, ...]:
    return (delta, index)


def _smallest_step_first(delta: int, alloc: int, index: int, ready_at: int) -> tuple[int, ...]:
    return (alloc, delta, index)


def _continue_branch(delta: int, alloc: int, index: int, ready_at: int) -> tuple[int, ...]:
    # Freeing nodes first; among the rest, the node made ready most recently (depth-first),
    # which finishes one branch before starting the next.
    return (0 if delta <= 0 else 1, delta if delta <= 0 else 0, -ready_at, delta, index)


GREEDY_KEYS: tuple[GreedyKey, ...] = (_least_live_after, _smallest_step_first, _continue_branch)


def greedy_order(model: MemoryModel, key: GreedyKey = _least_live_after) -> tuple[int, ...]:
    """One greedy pass: repeatedly run the ready node with the smallest key."""
    found = greedy_search(model, key)
    assert found is not None  # no bound: the pass runs to the end
    return found[0]


@dataclass(frozen=True)
class GreedyStart:
    """What every greedy pass starts from (the passes copy the counts they change)."""

    successors: Sequence[Sequence[int]]  # the model's own (read only)
    waiting: list[int]  # node -> predecessors not run yet
    pending: list[int]  # buffer -> users not run yet
    pending_sum: list[int]  # buffer -> sum of those users: the last one, when 1 is left
    frees: list[int]  # node -> bytes freed if it ran now


def greedy_start(model: MemoryModel) -> GreedyStart:
    sizes, pinned = model.buffer_bytes, model.pinned
    frees = [0] * model.node_count
    for buffer, users in enumerate(model.users):
        if len(users) == 1 and not pinned[buffer]:
            frees[users[0]] += sizes[buffer]
    return GreedyStart(model.successor_lists, list(map(len, model.predecessors)),
                       list(map(len, model.users)), list(map(sum, model.users)), frees)


def greedy_search(model: MemoryModel, key: GreedyKey = _least_live_after,
                  below: int | None = None, start: GreedyStart | None = None,
                  profile: tuple[list[int], list[int]] | None = None
                  ) -> tuple[tuple[int, ...], int] | None:
    """`greedy_order` and its peak (`order_peak`'s, residents included), or None as soon as
    a step's live bytes reach `below`: that order's peak could not be lower than `below`.

    The pass knows each step's live bytes as it runs: running a node allocates its buffers
    and frees `frees[node]`, the buffers whose last pending user it is, which are those whose
    last use it is in the order being built (the frees `step_events` finds for that order).
    `start`: the model's `greedy_start`, if at hand (best_order's passes share one).
    `profile`: two empty lists the pass fills with the live bytes during and after each step
    (`live_profile` of the order it returns: its allocations, then its frees).
    """
    n = model.node_count
    sizes = model.buffer_bytes
    alloc = model.alloc_bytes
    start = start or greedy_start(model)
    successors = start.successors
    uses, pinned = model.uses, model.pinned  # locals: the loop below runs per node
    waiting, pending = start.waiting.copy(), start.pending.copy()
    pending_sum, frees = start.pending_sum.copy(), start.frees.copy()
    version = [0] * n
    ready_at = [0] * n
    # entries are the key's items then (node, version), one flat tuple: comparing nested
    # tuples compares the keys twice (equality, then order), and the heap compares per level
    heap: list[tuple[int, ...]] = []
    heappush, heappop = heapq.heappush, heapq.heappop

    def push(node: int) -> None:
        version[node] += 1
        entry = key(alloc[node] - frees[node], alloc[node], node, ready_at[node])
        heappush(heap, (*entry, node, version[node]))

    # the nodes ready at the start (thousands in an export), made into a heap at once: the
    # entries are distinct (node, version), so the pops follow their order however built
    for node in range(n):
        if waiting[node] == 0:
            version[node] = 1
            heap.append((*key(alloc[node] - frees[node], alloc[node], node, 0), node, 1))
    heapq.heapify(heap)
    order: list[int] = []
    done = [False] * n
    live = model.resident_bytes
    peak = -1  # order_peak's value for an empty order
    stop = below if below is not None else live + sum(alloc) + 1  # no step reaches it
    during, after = profile if profile is not None else ([], [])
    while heap:
        entry = heappop(heap)
        node = entry[-2]
        if done[node] or entry[-1] != version[node]:
            continue  # run already, or pushed again since with another key
        done[node] = True
        order.append(node)
        live += alloc[node]
        if live > peak:
            if live >= stop:
                return None
            peak = live
        during.append(live)
        live -= frees[node]
        after.append(live)
        for buffer in uses[node]:
            pending[buffer] -= 1
            pending_sum[buffer] -= node
            if pending[buffer] == 1 and not pinned[buffer]:
                last = pending_sum[buffer]
                frees[last] += sizes[buffer]
                if waiting[last] == 0 and not done[last]:
                    push(last)
        for succ in successors[node]:
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready_at[succ] = len(order)
                push(succ)
    if len(order) != n:
        raise ValueError("the graph has a cycle: no topological order exists")
    return tuple(order), peak


# ----- what moved -----------------------------------------------------------------------------


def moved_nodes(order: Sequence[int]) -> tuple[list[tuple[int, int]], int]:
    """Nodes outside a longest subsequence kept in model order: [(node, new step)], count.

    Those are the fewest nodes whose moving turns the model order (node i at step i) into
    `order`; the list has the farthest moves first.
    """
    kept = _longest_increasing(order)
    moved = [(node, step) for step, node in enumerate(order) if node not in kept]
    # farthest first, ties by new step: two stable sorts on one key each (the list is in
    # step order; a reversed sort keeps equal keys in order), no key tuple per node
    moved.sort(key=_distance, reverse=True)
    return moved, len(moved)


def _distance(item: tuple[int, int]) -> int:
    return abs(item[1] - item[0])


def _longest_increasing(sequence: Sequence[int]) -> set[int]:
    tails: list[int] = []  # tails[k]: smallest last value of an increasing run of length k+1
    tail_at: list[int] = []  # position of that value
    previous = [-1] * len(sequence)
    for position, value in enumerate(sequence):
        k = bisect_left(tails, value)
        if k == len(tails):
            tails.append(value)
            tail_at.append(position)
        else:
            tails[k] = value
            tail_at[k] = position
        previous[position] = tail_at[k - 1] if k else -1
    result: set[int] = set()
    position = tail_at[-1] if tail_at else -1
    while position >= 0:
        result.add(sequence[position])
        position = previous[position]
    return result


def dependency_graph(model: MemoryModel) -> nx.DiGraph[int]:
    """The model's dependencies as a networkx DiGraph (node indices), e.g. for DAG checks."""
    import networkx as nx

    graph: nx.DiGraph[int] = nx.DiGraph()
    graph.add_nodes_from(range(model.node_count))
    graph.add_edges_from((p, n) for n, preds in enumerate(model.predecessors) for p in preds)
    return graph
