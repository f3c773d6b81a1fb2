"""``ragtrail compare`` paired in SQL: the statements, one set for the embedded engine and a ClickHouse server.

The reference is :mod:`ragtrail.inspect.compare` (Python, one record per question held); these
statements compute the same answer without a record per trace in Python:

* :func:`winners_query`, :func:`kept_query`: per side, one row per question (hop 0's query receipt)
  read from the side's per-trace records (:mod:`.per_trace`): its latest trace (the latest start wins;
  on a tie the one read first, as ``SideCounts.counted`` keeps it), where the question first appears in
  the side's reading order, what every trace read adds to the side's counts (traces, requests, bases;
  traces without a query receipt in the row of question ``''``), and the kept trace's small columns
  (answer, refusal, status, cited, its context's size, its own survival shares, its signature);
* :func:`joined_query`: the two sides' kept rows joined on the question, ``same`` where the kept traces'
  signatures are equal; :func:`differing_query` and :func:`heavy_query`: the stages of just the traces
  whose signatures differ;
* :func:`pairs_query`: for each question, the verdict and the first stage whose evidence differs
  (``inspect.compare.pair``'s rule: stages keyed by kind, component and occurrence, handed-on ids
  compared in order; generate and cite are the model's, not evidence), whether any stage differs at all
  (only those rows carry their stages, for the reference ``pair`` to describe), and each side's
  survival shares of the other's evidence; where the signatures are equal none differs and the shares
  are the side's own, so the stage arrays are compared only where they differ;
* the aggregates over them (:func:`side_query`, :func:`pair_counts_query`, :func:`verdicts_query`,
  :func:`survival_query`) and the listings (:func:`listing_query`), which :mod:`.paired` runs.

Ids are the JSON id lists of the slim spans (:mod:`.spans`), read (in :mod:`.per_trace`) by ``JSONExtract(..., 'Array(String)')``:
strings as written, a JSON number as its text (as the Python records' ``str`` says ``1`` or ``2.5``).
"""

from __future__ import annotations

from ragtrail.contract import semconv as sc

from .per_trace import shares

_MODEL = f"['{sc.KIND_GENERATE}', '{sc.KIND_CITE}']"

HEAVY = "TraceId, keys, states, ids, cited, in_context, handed_labels, handed_ids, raw_stages"
"""What pairing reads of a trace only where the two sides' signatures differ (:func:`heavy_query`)."""


ORDER_WIDTH = 32
"""The width of an order key (:func:`order_key`)."""


def order_key(*parts: tuple[str, int]) -> str:
    """SQL for a sortable text of unsigned integer expressions (``(expression, hex digits)`` each), left
    padded to :data:`ORDER_WIDTH`: compared as text it orders as the tuple of the integers would, and a
    text is far cheaper than a tuple to ``min``/``argMin`` over (a tuple aggregates as a generic value)."""
    text = ", ".join(f"leftPad(hex({e}), {w}, '0')" for e, w in parts)
    return f"leftPad(concat({text}), {ORDER_WIDTH}, '0')"


def signed_key(expression: str) -> str:
    """An ``Int64`` expression as an unsigned one of the same order (the sign bit flipped), for :func:`order_key`."""
    return f"bitXor(reinterpretAsUInt64({expression}), toUInt64(9223372036854775808))"


def winners_query(records: str, order: str | None = None) -> str:
    """One row per question of one side (``q``; ``''``: the traces without a query receipt) from its
    per-trace records (``records``: a table of :func:`.per_trace.select_sql`): what its traces add to the
    side's counts, where it is first read (``pos``; ``order``: a subquery of ``TraceId, OrderKey``, the
    side's reading order, ``OrderKey`` an :func:`order_key`; a trace it lacks is read first), and the
    trace kept (``winner``, its ``weight``: the latest start; on a tie the one read first)."""
    zero = f"repeat('0', {ORDER_WIDTH})"
    place = zero if order is None else f"if(o.OrderKey = '', {zero}, o.OrderKey)"
    latest = order_key((signed_key("-start_ns"), 16))
    joined = "" if order is None else f"LEFT JOIN ({order}) AS o ON k.TraceId = o.TraceId"
    keys = "TraceId, start_ns, q, weight, basis, tail_stamped"
    return f"""
SELECT q, n, requests, bases, stamped, pos, kept.1 AS winner, kept.2 AS weight
FROM (
    SELECT q, count() AS n, sum(weight) AS requests, sumMap([basis], [toUInt64(1)]) AS bases,
        countIf(tail_stamped) AS stamped, min(ord) AS pos, argMin((TraceId, weight), concat({latest}, ord)) AS kept
    FROM (SELECT k.*, concat({place}, k.TraceId) AS ord FROM (SELECT {keys} FROM {records}) AS k {joined})
    GROUP BY q
)
"""


def kept_query(records: str, winners: str) -> str:
    """:func:`winners_query`'s rows (``winners``: a table of them) with what pairing reads of every
    kept trace: answer, refusal, status, cited, the size of its context, its own survival shares and
    its signature (not its stages: :func:`heavy_query` reads those where signatures differ). Two
    statements, not one: an aggregate carrying the whole record (``argMin`` of a tuple of arrays) costs more than the join."""
    return f"""
SELECT w.q AS q, w.n AS n, w.requests AS requests, w.bases AS bases, w.stamped AS stamped, w.pos AS pos, w.weight AS weight,
    r.TraceId AS trace_id, answer, refused, run_status, degraded, fallback, cited, length(in_context) AS n_in_context, self_shares, sig
FROM {records} AS r
INNER JOIN {winners} AS w ON r.TraceId = w.winner
"""


def heavy_query(records: str, traces: str) -> str:
    """The :data:`HEAVY` columns of the records of the traces ``traces`` (a subquery of trace ids)."""
    return f"SELECT {HEAVY} FROM {records} WHERE TraceId IN ({traces})"


def _first_difference(x: str, y: str) -> str:
    """The first stage of ``x`` whose evidence differs from ``y``'s (missing there, or other ids handed on), 0 if none."""
    j = f"indexOf({y}.keys, {x}.keys[i])"
    return f"arrayFirstIndex(i -> NOT has({_MODEL}, {x}.keys[i].1) AND ({j} = 0 OR {x}.ids[i] != {y}.ids[{j}]), arrayEnumerate({x}.keys))"


def joined_query(kept_a: str, kept_b: str) -> str:
    """One row per question on either side (``kept_a``/``kept_b``: tables of :func:`kept_query`), joined
    on the question: ``same`` when both sides' kept traces have one signature (no stage differs)."""
    return f"""
SELECT if(a.present, a.q, b.q) AS q, a.present AS in_a, b.present AS in_b, in_a AND in_b AS paired, a.pos AS pos_a, b.pos AS pos_b,
    a.trace_id AS trace_a, b.trace_id AS trace_b, a.answer AS answer_a, b.answer AS answer_b, a.refused AS refused_a, b.refused AS refused_b,
    a.run_status AS run_status_a, b.run_status AS run_status_b, a.cited AS cited_a, b.cited AS cited_b,
    paired AND a.sig = b.sig AS same, a.self_shares AS self_shares_a, b.self_shares AS self_shares_b,
    (length(b.cited), b.n_in_context) AS base_a, (length(a.cited), a.n_in_context) AS base_b
FROM (SELECT *, 1 AS present FROM {kept_a} WHERE q != '') AS a
FULL OUTER JOIN (SELECT *, 1 AS present FROM {kept_b} WHERE q != '') AS b ON a.q = b.q
"""


def differing_query(joined: str, side: str) -> str:
    """Side ``'a'`` or ``'b'``'s kept traces of the paired questions whose signatures differ."""
    return f"SELECT trace_{side} FROM {joined} WHERE paired AND NOT same"


def pairs_query(joined: str, heavy_a: str, heavy_b: str) -> str:
    """:func:`joined_query`'s rows (``joined``: a table of them) with, for each paired question, the
    verdict and the first stage whose evidence differs, whether any stage differs (only those rows carry
    their stages), and each side's survival shares of the other's evidence; the stages are compared only
    where the signatures differ (``heavy_a``/``heavy_b``: tables or subqueries of :func:`heavy_query`
    holding at least those traces), elsewhere no stage differs and each side's shares are its own."""
    j = "indexOf(b.keys, a.keys[i])"
    differs = f"arrayExists(i -> {j} = 0 OR a.states[i] != b.states[{j}] OR a.ids[i] != b.ids[{j}], arrayEnumerate(a.keys))"
    answered = "answer_a != '' AND answer_b != ''"
    label = "concat({k}.keys[{i}].1, ' ', {k}.keys[{i}].2)"
    compared = f"""
SELECT p.q AS q, {_first_difference("a", "b")} AS first_a, {_first_difference("b", "a")} AS first_b,
    multiIf(first_a > 0, {label.format(k="a", i="first_a")}, first_b > 0, {label.format(k="b", i="first_b")}, NULL) AS first_difference,
    {differs} OR arrayExists(k -> NOT has(a.keys, k), b.keys) AS differs,
    a.raw_stages AS stages_a, b.raw_stages AS stages_b, {shares("a", "b")} AS shares_a, {shares("b", "a")} AS shares_b, 1 AS present
FROM (SELECT q, trace_a, trace_b FROM {joined} WHERE paired AND NOT same) AS p
INNER JOIN ({heavy_a}) AS a ON a.TraceId = p.trace_a
INNER JOIN ({heavy_b}) AS b ON b.TraceId = p.trace_b
"""
    return f"""
SELECT q, in_a, in_b, paired, pos_a, pos_b, trace_a, trace_b, answer_a, answer_b, refused_a, refused_b, run_status_a, run_status_b, cited_a, cited_b,
    verdict, first_difference, differs, newly_refused, changed, stages_a, stages_b, shares_a, shares_b, base_a, base_b
FROM (
    SELECT j.q AS q, in_a, in_b, paired, pos_a, pos_b, trace_a, trace_b, answer_a, answer_b, refused_a, refused_b, run_status_a, run_status_b,
        cited_a, cited_b, base_a, base_b, c.first_difference AS first_difference, paired AND c.present = 1 AND c.differs AS differs,
        multiIf(first_difference IS NOT NULL, 'different evidence', {answered} AND answer_a != answer_b, 'same evidence, different answer',
            {answered}, 'same evidence, same answer', 'same evidence') AS verdict,
        refused_b = 'true' AND refused_a != 'true' AS newly_refused,
        verdict IN ('different evidence', 'same evidence, different answer') AS changed,
        if(differs, c.stages_a, []) AS stages_a, if(differs, c.stages_b, []) AS stages_b,
        if(c.present = 1, c.shares_a, self_shares_a) AS shares_a, if(c.present = 1, c.shares_b, self_shares_b) AS shares_b
    FROM {joined} AS j
    LEFT JOIN ({compared}) AS c ON j.q = c.q
)
"""


def side_query(kept: str) -> str:
    """One side's counts (every trace read) and rates (its questions' latest traces): one row."""
    known = "refused IN ('true', 'false')"
    return f"""
SELECT sum(n), sum(requests), sumMap(bases), sum(stamped), sumIf(n, q = ''), sumIf(n - 1, q != ''),
    countIf(q != ''), countIf(q != '' AND refused = 'true'), countIf(q != '' AND {known}),
    sumIf(weight, q != '' AND refused = 'true'), sumIf(weight, q != '' AND {known}), sumIf(weight, q != ''),
    countIf(q != '' AND degraded), sumIf(weight, q != '' AND degraded), countIf(q != '' AND fallback), sumIf(weight, q != '' AND fallback)
FROM {kept}
"""


def pair_counts_query(pairs: str) -> str:
    """Paired, newly refused, only in A, only in B, changed (listed in the terminal), and the other
    side's evidence sizes over the paired questions (the survival shares' denominators): one row."""
    return f"""
SELECT countIf(paired), countIf(paired AND newly_refused), countIf(in_a AND NOT in_b), countIf(in_b AND NOT in_a), countIf(paired AND changed),
    sumIf(base_a.1, paired), sumIf(base_a.2, paired), sumIf(base_b.1, paired), sumIf(base_b.2, paired)
FROM {pairs}
"""


def verdicts_query(pairs: str, newly_refused: bool = False) -> str:
    """``key, count`` of the paired questions' verdicts (``newly_refused``: the first differing stage,
    else the verdict, of the questions refused in B alone), first seen (in A's order) first."""
    key, where = ("ifNull(first_difference, verdict)", "AND newly_refused") if newly_refused else ("verdict", "")
    return f"SELECT {key} AS key, count(), min(pos_a) AS seen FROM {pairs} WHERE paired {where} GROUP BY key ORDER BY seen"


def survival_query(pairs: str, side: str) -> str:
    """``label, traces, cited present, in context present`` of side ``'a'`` or ``'b'``'s stages over
    the paired questions, in the order that side first ran them (its questions' order, then stage order)."""
    return f"""
SELECT sh.1 AS label, count(), sum(sh.2), sum(sh.3), min((pos_{side}, n)) AS seen
FROM {pairs} ARRAY JOIN shares_{side} AS sh, arrayEnumerate(shares_{side}) AS n
WHERE paired GROUP BY label ORDER BY seen
"""


PAIR_COLUMNS = "q, trace_a, trace_b, answer_a, answer_b, refused_a, refused_b, run_status_a, run_status_b, cited_a, cited_b, stages_a, stages_b"
"""What a listed pair's row holds (``stages_*`` empty unless some stage differs)."""


def listing_query(pairs: str, which: str, limit: int | None = None) -> str:
    """The rows of one listing: ``only_in_a``/``only_in_b`` (question, trace), or the paired questions
    (``questions``: A's order; ``changed``: those the terminal lists, newly refused first, then by
    question) with what :mod:`.paired` hands to the reference ``pair``."""
    wanted = {
        "only_in_a": ("q, trace_a", "in_a AND NOT in_b", "pos_a"),
        "only_in_b": ("q, trace_b", "in_b AND NOT in_a", "pos_b"),
        "questions": (PAIR_COLUMNS, "paired", "pos_a"),
        "changed": (PAIR_COLUMNS, "paired AND changed", "NOT newly_refused, q"),
    }
    columns, where, order = wanted[which]
    return f"SELECT {columns} FROM {pairs} WHERE {where} ORDER BY {order}" + ("" if limit is None else f" LIMIT {int(limit)}")
