"""Exact minimum-peak orders of small MemoryModels, and of windows of a large one.

`exact_order`: a bottleneck shortest path over the sets of nodes already run (down-sets of
the DAG: the memory live after a set does not depend on the order that ran it), best-first by
the peak so far, pruned at the best peak known; it proves the optimum or gives up after
`max_states` sets. Nodes that can only add memory and that nothing waits for run last,
outside the search (`deferrable_nodes`). `refine_around_peak`: windows of consecutive steps
around the peak re-ordered by the same search, everything else held fixed
(passes/schedule.py runs both).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from graphmem.passes.memory_model import MemoryModel, live_profile

EXACT_MAX_STATES = 50_000


# ----- exact search ---------------------------------------------------------------------------


def exact_order(model: MemoryModel, upper_bound: int,
                max_states: int = EXACT_MAX_STATES) -> tuple[tuple[int, ...] | None, int] | None:
    """(order, peak) of minimum peak; None when the state budget runs out.

    States are the sets of nodes run so far (bitmasks); the cost of reaching a set is the
    peak so far; live memory after a set is the same for every order that ran it. A set is
    expanded once, at its smallest cost (Dijkstra on the bottleneck cost, which is monotone).
    Paths whose peak reaches `upper_bound` (a peak some known order achieves) are pruned; when
    nothing beats it, the answer is (None, upper_bound): that known order is optimal.

    Nodes that can only add memory and that nothing waits for (`deferrable_nodes`) run last,
    outside the search: a window of 14 weight copies and 2 convolutions searches the 2.
    """
    n = model.node_count
    deferred = deferrable_nodes(model)
    deferred_bytes = sum(model.alloc_bytes[node] for node in deferred)
    searched = [node for node in range(n) if node not in set(deferred)]
    full = sum(1 << node for node in searched)
    pred_mask = [sum(1 << p for p in preds) for preds in model.predecessors]
    user_mask = [sum(1 << u for u in users) for users in model.users]
    alloc = model.alloc_bytes
    releases = [[(user_mask[b], model.buffer_bytes[b]) for b in model.uses[node]
                 if not model.pinned[b]] for node in range(n)]
    start_live = model.resident_bytes
    best_cost = {0: start_live}
    parent: dict[int, tuple[int, int]] = {}
    live_after = {0: start_live}
    heap = [(start_live, 0)]
    expanded = 0
    while heap:
        cost, state = heapq.heappop(heap)
        if cost > best_cost.get(state, cost):
            continue
        if state == full:
            # the deferred nodes' steps: the last one holds everything live at the end
            peak = max(cost, live_after[full] + deferred_bytes) if deferred else cost
            if peak >= upper_bound:
                return None, upper_bound
            return (*_unwind(parent, full), *deferred), peak
        expanded += 1
        if expanded > max_states:
            return None
        live = live_after[state]
        for node in searched:
            bit = 1 << node
            if state & bit or pred_mask[node] & ~state:
                continue
            during = live + alloc[node]
            new_cost = max(cost, during)
            if new_cost >= upper_bound:
                continue
            after_state = state | bit
            if new_cost < best_cost.get(after_state, upper_bound):
                best_cost[after_state] = new_cost
                parent[after_state] = (state, node)
                freed = sum(size for users, size in releases[node]
                            if users & ~after_state == 0)
                live_after[after_state] = during - freed
                heapq.heappush(heap, (new_cost, after_state))
    return None, upper_bound


def deferrable_nodes(model: MemoryModel) -> tuple[int, ...]:
    """Nodes that may run last without raising any order's peak, in an order that runs them.

    Such a node keeps alive only buffers that outlive every node of `model` (pinned), so
    running it frees nothing, whenever it runs; and every node that waits for it is such a
    node too. Moved from anywhere to the end, it adds its bytes to no step before the end,
    and its own step holds at most what is live after the last node, which every order's last
    step holds. So the least peak over all orders is reached with them last, and the search
    needs only the other nodes (an exporter's copies of small weights, say, which a window
    would otherwise try in every interleaving: 2^14 sets for 14 copies).
    """
    pinned, successors = model.pinned, model.successors()
    deferred = [False] * model.node_count
    marked: list[int] = []  # each node after all that wait for it
    changed = True
    while changed:
        changed = False
        for node in reversed(range(model.node_count)):
            if not deferred[node] and all(pinned[b] for b in model.uses[node]) \
                    and all(deferred[s] for s in successors[node]):
                deferred[node] = True
                marked.append(node)
                changed = True
    return tuple(reversed(marked))


def _unwind(parent: dict[int, tuple[int, int]], state: int) -> tuple[int, ...]:
    order: list[int] = []
    while state:
        state, node = parent[state]
        order.append(node)
    return tuple(reversed(order))


# ----- exact re-ordering of windows around the peak -------------------------------------------

WINDOW_NODES = 16
WINDOW_MAX_STATES = 4_000
WINDOW_ROUNDS = 200


def refine_around_peak(model: MemoryModel, order: Sequence[int],
                       window: int = WINDOW_NODES, rounds: int = WINDOW_ROUNDS,
                       max_states: int = WINDOW_MAX_STATES,
                       profile: tuple[list[int], list[int]] | None = None
                       ) -> tuple[tuple[int, ...], int]:
    """Re-order windows of `window` consecutive steps around the peak, each optimally.

    Only the nodes inside a window move, so every step outside it keeps its live total: a
    window re-ordered to a lower local peak never raises the global one. Each round takes the
    current peak step, tries the windows centred on it, ending at it and starting at it, and
    keeps the first the exact search improves; it stops when none improves (or after
    `rounds`). This is what catches fork-join blocks (Inception branches, U-Net skips) where
    one step's greedy choice cannot see that a branch should run first.

    `profile`: `live_profile` of `order` (lists this search may change), where at hand (the
    greedy pass that found the order swept it).
    """
    current = list(order)
    during, live_after = profile if profile is not None else live_profile(model, current)
    peaks = _Peaks(during)
    position = [0] * model.node_count
    for step, node in enumerate(current):
        position[node] = step
    for _ in range(rounds):
        if peaks.peak() <= model.lower_bound_bytes:
            break  # no order peaks lower
        peak_step = peaks.first_peak_step()
        for start in _window_starts(peak_step, len(current), window):
            end = min(start + window, len(current))
            entry_live = live_after[start - 1] if start else model.resident_bytes
            local = _window_model(model, current, start, end, entry_live, position)
            found = exact_order(local, max(during[start:end]), max_states)
            if found is None or found[0] is None:
                continue
            nodes = current[start:end]
            current[start:end] = [nodes[i] for i in found[0]]
            for step in range(start, end):
                position[current[step]] = step
            # only the window's steps change: the rest keep their live totals
            during[start:end], live_after[start:end] = live_profile(local, found[0])
            peaks.changed(start, end)
            break
        else:
            break
    return tuple(current), peaks.peak()


class _Peaks:
    """The largest of a list of step totals and its first step, kept per block of steps:
    after a window's steps change only their blocks are read again, where the largest of
    the whole list was 3 reads of every step per round (16,000 steps, 150 rounds)."""

    BLOCK = 256

    def __init__(self, during: list[int]) -> None:
        self.during = during  # changed in place by the caller, then `changed` is told
        block = self.BLOCK
        self.tops = [max(during[i:i + block]) for i in range(0, len(during), block)]

    def changed(self, start: int, end: int) -> None:
        """Steps start..end-1 hold other totals."""
        block, during = self.BLOCK, self.during
        for b in range(start // block, (end - 1) // block + 1):
            self.tops[b] = max(during[b * block:(b + 1) * block])

    def peak(self) -> int:
        return max(self.tops)

    def first_peak_step(self) -> int:
        """The first step at the peak (as `during.index(max(during))`)."""
        top = max(self.tops)
        b = self.tops.index(top)
        return self.during.index(top, b * self.BLOCK)


def _window_starts(peak_step: int, steps: int, window: int) -> list[int]:
    last = max(steps - window, 0)
    starts = (peak_step - window // 2, peak_step - window + 1, peak_step)
    return list(dict.fromkeys(min(max(start, 0), last) for start in starts))


def _window_model(model: MemoryModel, order: list[int], start: int, end: int,
                  entry_live: int, position: list[int]) -> MemoryModel:
    """The steps start..end-1 as a small MemoryModel; everything else is fixed context.

    Its floor is the memory live on entry. A buffer made inside that is read after the window
    (or is a graph output) never frees inside it; one made before whose last users are all
    inside frees when they have run (it is part of the floor, allocated by no window node).
    """
    nodes = order[start:end]
    local = {node: i for i, node in enumerate(nodes)}
    buffer_ids: dict[int, int] = {}
    sizes: list[int] = []
    users: list[tuple[int, ...]] = []
    pinned: list[bool] = []
    allocates: list[list[int]] = [[] for _ in nodes]
    uses: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for buffer in model.uses[node]:
            if buffer in buffer_ids:
                uses[i].append(buffer_ids[buffer])
                continue
            made_inside = model.producer[buffer] in local
            if not made_inside and position[model.producer[buffer]] >= end:
                continue  # a holder running before the buffer exists: nothing to free here
            stays = model.pinned[buffer] or any(position[u] >= end for u in model.users[buffer])
            if stays and not made_inside:
                continue  # live across the whole window: part of the floor
            buffer_ids[buffer] = len(sizes)
            sizes.append(model.buffer_bytes[buffer])
            users.append(tuple(local[u] for u in model.users[buffer] if u in local))
            pinned.append(stays)
            if made_inside:
                allocates[local[model.producer[buffer]]].append(buffer_ids[buffer])
            uses[i].append(buffer_ids[buffer])
    return MemoryModel(
        node_names=tuple(model.node_names[n] for n in nodes),
        resident_bytes=entry_live,
        buffer_names=tuple(model.buffer_names[b] for b in buffer_ids),
        buffer_bytes=tuple(sizes),
        producer=tuple(users[b][0] if users[b] else 0 for b in range(len(sizes))),
        users=tuple(users),
        pinned=tuple(pinned),
        allocates=tuple(tuple(a) for a in allocates),
        uses=tuple(tuple(u) for u in uses),
        predecessors=tuple(tuple(local[p] for p in model.predecessors[n] if p in local)
                           for n in nodes),
        dims=model.dims,
    )
