"""The approximate CPU path: an IVF, alone or refined, chosen per matrix from a cost estimate.

Both plans start from the same spherical k-means lists (:class:`embscope.geometry.ivf.IvfIndex`)
and read off, from a sample of rows with known exact neighbours, the share of the matrix each
row must scan for a given recall (no scan needed, see :mod:`embscope.geometry.ivf`):

``ivf``
    scan enough lists for recall ``IVF_TUNE_RECALL`` on the sample. Cost ≈ s(0.97)·n²·d.
    Cheapest on clustered matrices (planted clusters need nprobe 1).
``refined``
    scan only enough lists for ``REFINE_START_RECALL``, keep the best ``REFINE_KEEP`` per row, then
    "neighbours of neighbours" passes (:mod:`embscope.geometry.refine`) until the sample recall
    reaches ``REFINE_TARGET``. Cost ≈ s(start)·n²·d + passes·n·(2·keep)²·d·``ACCESS_PENALTY``.
    Cheapest on diffuse matrices (Gemma-3-270M needs s(0.97) ≈ 0.5 but s(0.5) ≈ 0.02).

``hnsw``
    a FAISS HNSW graph (:mod:`embscope.geometry.hnsw`), considered only when its pilot on a
    subset showed indicator errors within bounds; its cost is the pilot's build time scaled to n,
    as a share of exact search's estimated time.

The plan with the lower estimate runs (``auto``); the estimates go into the graph's record.
When neither beats ``EXACT_SHARE``·n²·d, exact search is used instead. The sample used here is
the *tuning* half; the recall reported in the graph is measured on the other, held-out half.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from embscope.geometry.ivf import IVF_TUNE_RECALL, IvfIndex

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: recall of the IVF graph the refinement starts from
REFINE_START_RECALL = 0.6
#: candidates kept per row during refinement (the first k are returned)
REFINE_KEEP = 24
#: tuning-sample recall at which refinement stops (the 0.9 goal plus room for sampling error)
REFINE_TARGET = 0.95
#: expected passes, for the cost estimate
REFINE_PASSES = 6
#: random row reads cost this many times a BLAS multiply-add (measured order of magnitude)
ACCESS_PENALTY = 4.0
#: a plan estimated above this share of exact search's work falls back to exact search
EXACT_SHARE = 0.35


def plan_costs(index: IvfIndex, tune_rows, tune_ids, k: int) -> dict[str, Any]:
    """Estimated work (as shares of exact search's n²·d multiply-adds) of both plans."""
    n = index.xn.shape[0]
    np_ivf, rec_ivf, s_ivf = index.tune(tune_rows, tune_ids, IVF_TUNE_RECALL)
    np_ref, rec_ref, s_ref = index.tune(tune_rows, tune_ids, REFINE_START_RECALL)
    width = 2 * max(REFINE_KEEP, k)
    refine_share = REFINE_PASSES * width * width * ACCESS_PENALTY / n
    return {"ivf": {"nprobe": np_ivf, "tuned_recall": rec_ivf, "scanned_share": s_ivf, "cost": s_ivf},
            "refined": {"nprobe": np_ref, "tuned_recall": rec_ref, "scanned_share": s_ref,
                        "cost": s_ref + refine_share}}


def approx_knn(xn: "torch.Tensor", k: int, *, tune_rows: "torch.Tensor", tune_ids: "torch.Tensor",
               tune_kth: "torch.Tensor", method: str = "auto", seed: int = 0, progress: bool = True,
               hnsw_cost: float | None = None):
    """kNN of unit rows ``xn`` by the cheapest plan (``method`` ``auto``; ``hnsw_cost``, HNSW's
    estimated share of exact search, adds it to the plans) or the one named (``ivf`` /
    ``refined`` / ``hnsw``). ``tune_rows`` (s,) with exact neighbour ids ``tune_ids`` (s, k) and
    exact k-th similarities ``tune_kth`` (s,).

    Returns (sims (n, k), ids (n, k), params) as numpy arrays, or (None, None, params) when
    ``auto`` finds exact search cheaper.
    """
    from embscope.geometry.refine import refine_graph

    from embscope.geometry.hnsw import hnsw_graph

    if method == "hnsw":  # asked for by name: no lists to build or plans to weigh
        sims, ids, hp = hnsw_graph(xn, k)
        return sims, ids, {"method": "hnsw", **hp}
    index = IvfIndex(xn, seed=seed)
    costs = plan_costs(index, tune_rows, tune_ids, k)
    if hnsw_cost is not None:
        costs["hnsw"] = {"cost": hnsw_cost}
    chosen = method if method != "auto" else min(costs, key=lambda p: costs[p]["cost"])
    plan = costs[chosen]
    params: dict[str, Any] = {"method": chosen, "nlist": index.nlist,
                              "estimated_cost": {p: round(c["cost"], 4) for p, c in costs.items()}}
    if method == "auto" and plan["cost"] > EXACT_SHARE:
        return None, None, params
    if chosen == "hnsw":
        sims, ids, hp = hnsw_graph(xn, k)
        return sims, ids, {**params, **hp}
    params.update(nprobe=plan["nprobe"], scanned_share=round(plan["scanned_share"], 4),
                  tuned_recall=round(plan["tuned_recall"], 4))
    keep = k if chosen == "ivf" else max(REFINE_KEEP, k)
    sims, ids = index.scan(plan["nprobe"], keep, progress=progress)
    if chosen == "refined":
        xs = np.ascontiguousarray(index.xn.numpy())
        sims, ids, rp = refine_graph(xs, sims, ids, k, check_rows=tune_rows.cpu().numpy(),
                                     check_kth=tune_kth.cpu().numpy(), target=REFINE_TARGET,
                                     seed=seed, group=index.assign.numpy(), progress=progress)
        params.update(rp)
    return np.ascontiguousarray(sims[:, :k]), np.ascontiguousarray(ids[:, :k]), params
