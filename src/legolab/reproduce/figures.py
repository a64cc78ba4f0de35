"""What each figure of the paper trains, what it claims, and how the claim is judged.

A *variant* is a label for one kind of run (``bert``, ``albert-ntr12``, ``d3-mimic-bert``): a
config kind (``STEMS``) plus overrides, the same at every figure that uses it, so figures share
runs (fig3's ``bert`` is also fig15's n = 12 and fig16's depth 6). A *judge* turns the measured
summary of a figure into verdicts, one per part of the paper's claim: ``holds``, ``does not
hold``, or ``cannot be tested at this scale`` (with the reason), each with its evidence.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import LegoError

HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "cannot be tested at this scale"
PASS = 0.95      # a variable is learned at 95% test accuracy
MARGIN = 0.05    # "better" means at least 5 points more mean accuracy

# config kind -> (shipped config, overrides), per scale. At paper scale the MiniLM-shaped runs
# of Fig. 6 and 12 are BERT-base reading word pieces, so that random, pretrained (--pretrained,
# a local bert-base-uncased) and mimicking starts share one model.
# Task 2 keeps cpu/bert-d3's association scaffold (Task 1's recipe dropped it; D3 was not probed without it)
D3_AIDS = ["train.steps=16000", "train.scaffold=8.0", "train.scaffold_steps=6000", "train.guide_steps=6000"]
STEMS = {
    "cpu": {"bert": ("cpu/bert", []), "albert": ("cpu/albert", []), "minilm": ("cpu/minilm", []),
            "bert-d3": ("cpu/bert-d3", []), "albert-d3": ("cpu/albert", ["task.group=d3", *D3_AIDS]),
            "pretrain": ("cpu/pretrain", [])},
    "paper": {"bert": ("paper/bert-base", []), "albert": ("paper/albert-base", []),
              "minilm": ("paper/bert-base", ["model.tokenizer=wordpiece"]),
              "bert-d3": ("paper/bert-base", ["task.group=d3"]), "albert-d3": ("paper/albert-base", ["task.group=d3"])},
}
SHORTCUT = "train.supervise=[0,1,2,3,4,11]"
NO_GUIDE = "train.guide=0"  # LEGO attention hard-codes the association map the guidance teaches
STOCHASTIC_DEPTH = ["train.depth_min=6", "train.depth_max=12", "train.eval_depth=12"]
DEPTHS = {"cpu": (2, 4, 6, 8), "paper": (3, 6, 9, 12)}
# Fig. 15 at CPU scale: n = 16 fits its ten supervised variables (in 2 of 3 seeds) only on three
# times the n_tr = 6 budget, and n = 20 fits 7 of its 14 even there (docs/cpu_recipe.md, "Fig. 15's
# longer chains"), so the CPU figure stops at 16
CHAINS = {"cpu": (8, 12, 16), "paper": (8, 12, 16, 20)}
CHAIN_BUDGET = {"cpu": {16: 3}, "paper": {}}
# Fig. 17's thin BERT: at CPU scale 28 wide (d_ff 84) has 50,570 parameters without embeddings,
# cpu/albert 50,882; at paper scale the paper's hidden size 96 (d_ff 384)
THIN = {"cpu": ["model.d_model=28", "model.d_ff=84"], "paper": ["model.d_model=96", "model.d_ff=384"]}
# Fig. 3 top: at CPU scale n_tr = 12 fits all twelve variables in every seed only on three times the
# n_tr = 6 budget (docs/cpu_recipe.md, "n_tr = 12 on three times the budget"): on 8,000 steps no seed
# fit more than #0..#6, on 16,000 three of six runs ended below 95% on #11
NTR12_BUDGET = {"cpu": 3, "paper": 1}


@dataclass(frozen=True)
class Variant:
    stem: str
    overrides: tuple[str, ...] = ()
    mimic: bool = False       # initialised by a mimicking stage (section 4.2.2) of the same config
    pretrained: bool = False  # initialised from a pretrained checkpoint
    budget: int = 1           # times the config's steps (or epochs) and evaluation interval, after overrides


def catalogue(scale: str) -> dict[str, Variant]:
    """Every variant label at ``scale``."""
    v = {
        "bert": Variant("bert"), "albert": Variant("albert"),
        "bert-ntr12": Variant("bert", ("train.n_tr=12",), budget=NTR12_BUDGET[scale]),
        "albert-ntr12": Variant("albert", ("train.n_tr=12",), budget=NTR12_BUDGET[scale]),
        "albert-depth12": Variant("albert", ("model.n_layers=12",)),
        "albert-stochastic-depth": Variant("albert", tuple(STOCHASTIC_DEPTH)),
        "bert-0to4": Variant("bert", ("train.n_tr=5",)), "bert-0to4+11": Variant("bert", (SHORTCUT,)),
        "albert-0to4": Variant("albert", ("train.n_tr=5",)), "albert-0to4+11": Variant("albert", (SHORTCUT,)),
        "bert-thin": Variant("bert", tuple(THIN[scale])),
        "d3-bert": Variant("bert-d3"), "d3-albert": Variant("albert-d3"), "d3-mimic-bert": Variant("bert-d3", mimic=True),
        "lego-v0": Variant("bert", ("model.attention=lego-v0", NO_GUIDE)),
        "lego-v1": Variant("bert", ("model.attention=lego-v1", NO_GUIDE)),
        "identity-scaled": Variant("bert", ("model.identity_scaled=true",)),
    }
    for init in ("random", "pretrained", "mimic"):
        for suffix, extra in (("", ()), ("-ntr12", ("train.n_tr=12",))):
            v[f"minilm-{init}{suffix}"] = Variant("minilm", extra, mimic=init == "mimic", pretrained=init == "pretrained")
    for n in CHAINS[scale]:
        v[f"bert-n{n}"] = Variant("bert", (f"task.n={n}", f"train.n_tr={n - 6}"), budget=CHAIN_BUDGET[scale].get(n, 1))
    for arch in ("bert", "albert"):
        for d in DEPTHS[scale]:
            v[f"{arch}-depth{d}"] = Variant(arch, (f"model.n_layers={d}",))
    if scale == "cpu":
        # the CPU mimicking stage starts from zeroed residual branches: this control separates
        # that start from the mimicking itself
        v["minilm-zero-residual"] = Variant("minilm", ("model.residual_init=0",))
        v["d3-zero-residual-bert"] = Variant("bert-d3", ("model.residual_init=0",))
    return v


# ---- the measured summary a judge reads ----------------------------------------------------------
# label -> {"seeds", "mean", "min", "max" (final test accuracy per chain index), "supervised",
#           "chance", "first_pass" (step at which each index first reached PASS, mean over seeds;
#           None if a seed never did), "reached" (seeds in which it did), "max_dip", "steps"}
Summary = dict[str, dict]
Verdict = tuple[str, str, str]  # (part of the claim, verdict, evidence)


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def mean_at(s: dict, idx) -> float:
    return statistics.fmean(s["mean"][i] for i in idx)


def learned(s: dict) -> bool:
    return all(s["mean"][i] >= PASS for i in s["supervised"])


def unsupervised(s: dict) -> list[int]:
    return [i for i in range(len(s["mean"])) if i not in s["supervised"]]


def _need(S: Summary, *labels) -> str | None:
    missing = [x for x in labels if x not in S]
    return f"runs missing: {', '.join(missing)}" if missing else None


def _idx(idx) -> str:
    idx = list(idx)
    return f"#{idx[0]}..#{idx[-1]}" if len(idx) > 2 and idx == list(range(idx[0], idx[-1] + 1)) else \
        ", ".join(f"#{i}" for i in idx)


def better(S: Summary, a: str, b: str, idx=None, part: str = "") -> Verdict:
    """``a`` generalises better than ``b`` on ``idx`` (default: ``a``'s unsupervised indices)."""
    part = part or f"{a} better than {b}"
    if (why := _need(S, a, b)):
        return part, UNTESTABLE, why
    sa, sb = S[a], S[b]
    idx = list(idx if idx is not None else unsupervised(sa))
    if not learned(sa):  # extrapolation is a claim about models that fit their training variables
        sup = list(sa["supervised"])
        low_a, low_b = (pct(min(s["mean"][i] for i in sup)) for s in (sa, sb))
        return part, UNTESTABLE, f"{a} did not learn its supervised variables (the lowest of {_idx(sup)}: " \
                                 f"{low_a}; {b}'s: {low_b}), so it cannot extrapolate"
    da, db = mean_at(sa, idx), mean_at(sb, idx)
    evidence = f"mean accuracy on {_idx(idx)}: {a} {pct(da)}, {b} {pct(db)}"
    return part, HOLDS if da - db >= MARGIN else FAILS, evidence


def matches(S: Summary, a: str, b: str, idx, part: str = "") -> Verdict:
    """``a`` is as accurate as ``b`` on ``idx``: at most ``MARGIN`` below it on average."""
    part = part or f"{a} matches {b}"
    if (why := _need(S, a, b)):
        return part, UNTESTABLE, why
    da, db = mean_at(S[a], idx), mean_at(S[b], idx)
    return part, HOLDS if da >= db - MARGIN else FAILS, f"mean accuracy on {_idx(idx)}: {a} {pct(da)}, {b} {pct(db)}"


def sooner(S: Summary, a: str, b: str, part: str = "") -> Verdict:
    """``a`` learns its supervised variables sooner than ``b``: more of them pass 95% within the
    budget, or as many, by an earlier step on average. Testable when neither fits them all."""
    part = part or f"{a} learns sooner than {b}"
    if (why := _need(S, a, b)):
        return part, UNTESTABLE, why
    sup = S[a]["supervised"]
    passed = {x: {i: S[x]["first_pass"][i] for i in sup if S[x]["first_pass"][i] is not None} for x in (a, b)}
    if not passed[a] and not passed[b]:
        return part, UNTESTABLE, f"neither passed {pct(PASS)} on any supervised variable"

    def said(x):
        p = passed[x]
        return f"{x} {len(p)} of {len(sup)}" + (f" ({_idx(p)}, the last at step {max(p.values()):,.0f})" if p else "")

    evidence = f"supervised variables past {pct(PASS)}: {said(a)}; {said(b)}"
    if len(passed[a]) != len(passed[b]):
        return part, HOLDS if len(passed[a]) > len(passed[b]) else FAILS, evidence
    mean_step = {x: statistics.fmean(passed[x].values()) for x in (a, b)}
    if len(passed[a]) == 1:
        evidence += " (one variable each: thin evidence)"
    else:
        evidence += f"; mean step to {pct(PASS)}: {a} {mean_step[a]:,.0f}, {b} {mean_step[b]:,.0f}"
    return part, HOLDS if mean_step[a] < mean_step[b] else FAILS, evidence


def classical(S: Summary, labels, part="classical generalisation: every supervised variable learned") -> Verdict:
    if (why := _need(S, *labels)):
        return part, UNTESTABLE, why
    worst = {x: min(S[x]["mean"][i] for i in S[x]["supervised"]) for x in labels}
    evidence = "lowest supervised accuracy: " + ", ".join(f"{x} {pct(w)}" for x, w in worst.items())
    return part, HOLDS if all(w >= PASS for w in worst.values()) else FAILS, evidence


def shortcut_early(S: Summary, label: str, early: bool) -> Verdict:
    """Fig. 3 top / Fig. 12: with all 12 supervised, is the last variable learned before most of
    the others (the parity shortcut) or later than / alongside them?"""
    part = f"{label}: #11 learned {'before most other variables (the shortcut)' if early else 'later than or alongside the others'}"
    if (why := _need(S, label)):
        return part, UNTESTABLE, why
    s = S[label]
    first = s["first_pass"]
    if all(f is None for f in first):
        return part, UNTESTABLE, f"no variable reached {pct(PASS)}: the model learned nothing to order"
    drop = f"largest drop of a learned variable: {pct(s['max_dip'][0])} (#{s['max_dip'][1]})"
    if first[-1] is None:
        reached, seeds = s["reached"][-1], s["seeds"]
        final = pct(s["mean"][-1]) + (f", {100 * s['min'][-1]:.0f}-{pct(s['max'][-1])} over seeds" if seeds > 1 else "")
        said = f"#11 reached {pct(PASS)} in {reached} of {seeds} seeds" if reached else f"#11 never reached {pct(PASS)}"
        return part, UNTESTABLE if not early else FAILS, f"{said} (final {final}); {drop}"
    others = first[1:-1]
    before = sum(1 for f in others if f is None or f > first[-1])
    evidence = f"#11 passed {pct(PASS)} at step {first[-1]:.0f}, before {before} of #1..#10; {drop}"
    is_early = before > len(others) / 2
    return part, HOLDS if is_early == early else FAILS, evidence


# ---- judges, one per figure ------------------------------------------------------------------------
def judge_fig3(S):
    return [classical(S, ("bert", "albert", "bert-ntr12", "albert-ntr12")),
            better(S, "albert", "bert", [6, 7, 8], "n_tr = 6: ALBERT extrapolates (#6, #7 near-perfect, #8 non-trivial), BERT barely"),
            shortcut_early(S, "bert-ntr12", True), shortcut_early(S, "albert-ntr12", True)]


def judge_fig5(S):
    return [better(S, "albert-stochastic-depth", "albert-depth12",
                   part="stochastic depth 6..12 extrapolates better than fixed depth 12 (both tested at depth 12)")]


def judge_fig6(S):
    """The claim has two halves, "better" (extrapolation, once the supervised variables are fit)
    and "sooner" (how fast they are learned), judged apart: a budget too short for the first
    still tests the second."""
    out = [sooner(S, "minilm-pretrained", "minilm-random", part="pretrained learns sooner than random init"),
           better(S, "minilm-pretrained", "minilm-random", part="pretrained generalises better than random init"),
           sooner(S, "minilm-mimic", "minilm-random", part="mimicking learns sooner than random init"),
           better(S, "minilm-mimic", "minilm-random", part="mimicking narrows the gap to pretrained")]
    if "minilm-zero-residual" in S:
        out += [sooner(S, "minilm-mimic", "minilm-zero-residual",
                       part="control: mimicking learns sooner than its own zero-residual start without mimicking"),
                better(S, "minilm-mimic", "minilm-zero-residual",
                       part="control: mimicking beats its own zero-residual start without mimicking")]
    return out


def judge_fig11(S):
    return [better(S, f"{a}-0to4", f"{a}-0to4+11", list(range(5, 11)),
                   f"{a}: supervising #11 as well degrades extrapolation to #5..#10") for a in ("bert", "albert")]


def judge_fig12(S):
    return [shortcut_early(S, "minilm-pretrained-ntr12", False), shortcut_early(S, "minilm-mimic-ntr12", False),
            shortcut_early(S, "minilm-random-ntr12", True)]


def judge_fig15(scale):
    def judge(S):
        return [_short_chain_fits_but_does_not_extrapolate(S), _longer_chains_extrapolate_better(S, CHAINS[scale])]
    return judge


def _short_chain_fits_but_does_not_extrapolate(S) -> Verdict:
    part = "n = 8 learns its supervised variables but not the unseen ones"
    if (why := _need(S, "bert-n8")):
        return part, UNTESTABLE, why
    s = S["bert-n8"]
    sup, unseen = s["supervised"], unsupervised(s)
    evidence = (f"n = 8: the lowest of the supervised {_idx(sup)} {pct(min(s['mean'][i] for i in sup))}, "
                f"the mean on the unseen {_idx(unseen)} {pct(mean_at(s, unseen))} (chance {pct(s['chance'])})")
    if not learned(s):
        return part, UNTESTABLE, "n = 8 did not learn its supervised variables; " + evidence
    return part, HOLDS if mean_at(s, unseen) < s["chance"] + MARGIN else FAILS, evidence


def _longer_chains_extrapolate_better(S, chains) -> Verdict:
    """The longest chain of the scale against n = 8: at CPU scale n = 16, not the paper's 20."""
    longest = chains[-1]
    part = ("longer training chains extrapolate better: n = 8 not at all, n = 20 strongly" if longest == 20 else
            f"longer training chains extrapolate better: n = {longest} beyond n = 8 (the paper: n = 20 strongly)")
    labels = [f"bert-n{n}" for n in chains]
    if (why := _need(S, *labels)):
        return part, UNTESTABLE, why
    ext = {x: mean_at(S[x], unsupervised(S[x])) for x in labels}
    evidence = "mean accuracy on the 6 unsupervised variables: " + ", ".join(f"n = {x[6:]} {pct(e)}" for x, e in ext.items())
    if not learned(S[labels[-1]]):
        return part, UNTESTABLE, f"n = {longest} did not learn its supervised variables; " + evidence
    return part, HOLDS if ext[labels[-1]] - ext["bert-n8"] >= MARGIN else FAILS, evidence


def judge_fig16(scale):
    def judge(S):
        out = []
        for arch in ("bert", "albert"):
            low, high = f"{arch}-depth{DEPTHS[scale][0]}", f"{arch}-depth{DEPTHS[scale][-1]}"
            out.append(better(S, high, low, part=f"{arch}: greater depth generalises better"))
        return out
    return judge


def judge_fig17(S):
    parts = ("thin BERT with ALBERT's parameter count lacks ALBERT's in-distribution generalisation",
             "... and its #2 stays near chance (the paper: near 50% after 200 epochs)")
    if (why := _need(S, "bert-thin", "albert")):
        return [(p, UNTESTABLE, why) for p in parts]
    thin, albert = S["bert-thin"], S["albert"]
    sup = albert["supervised"]
    if not learned(albert):
        return [(p, UNTESTABLE, "ALBERT did not learn its supervised variables") for p in parts]
    ts, as_ = mean_at(thin, sup), mean_at(albert, sup)
    return [(parts[0], HOLDS if as_ - ts >= MARGIN else FAILS,
             f"mean on the supervised {_idx(sup)}: thin BERT {pct(ts)}, ALBERT {pct(as_)}"),
            (parts[1], HOLDS if thin["mean"][2] < thin["chance"] + MARGIN else FAILS,
             f"#2: thin BERT {pct(thin['mean'][2])}, ALBERT {pct(albert['mean'][2])}")]


def judge_fig18(S):
    out = [better(S, "d3-mimic-bert", "d3-bert", part="Task 2: mimicking BERT generalises better than random BERT")]
    if "d3-zero-residual-bert" in S:
        out.append(better(S, "d3-mimic-bert", "d3-zero-residual-bert",
                          part="control: mimicking beats its own zero-residual start without mimicking"))
    part = "no model generalises non-trivially beyond one extra variable (#7..#11 near chance)"
    labels = [x for x in ("d3-bert", "d3-albert", "d3-mimic-bert") if x in S]
    if not labels:
        out.append((part, UNTESTABLE, "runs missing"))
    else:
        beyond = {x: mean_at(S[x], range(7, 12)) for x in labels}
        chance = S[labels[0]]["chance"]
        evidence = f"mean on #7..#11 (chance {pct(chance)}): " + ", ".join(f"{x} {pct(b)}" for x, b in beyond.items())
        out.append((part, HOLDS if all(b < chance + 0.1 for b in beyond.values()) else FAILS, evidence))
    return out


def judge_lego_attention(S):
    """Section 5's "faster and better" (there for pretraining), asked of Task 1: as accurate on
    all 12 variables (within MARGIN), and the supervised ones learned sooner."""
    out = []
    for v in ("lego-v1", "lego-v0"):
        name = "LEGO " + v.split("-")[1]
        out += [matches(S, v, "bert", list(range(12)), f"{name} matches BERT on Task 1 (all 12 variables, within "
                                                          f"{MARGIN * 100:.0f} points)"),
                sooner(S, v, "bert", part=f"{name} learns the supervised variables sooner than BERT")]
    return out


@dataclass
class Figure:
    title: str
    claim: str                                   # the paper's claim, one sentence
    labels: Callable[[str], list[str]] | list[str]
    judge: Callable[[Summary], list[Verdict]] | Callable[[str], Callable] = None
    notes: dict[str, str] = field(default_factory=dict)  # scale -> what differs from the paper there
    scale_judge: bool = False                    # judge takes the scale first

    def variant_labels(self, scale: str) -> list[str]:
        labels = self.labels(scale) if callable(self.labels) else self.labels
        known = catalogue(scale)
        return [x for x in labels if x in known]  # scale-specific controls drop out elsewhere

    def verdicts(self, scale: str, summary: Summary) -> list[Verdict]:
        return (self.judge(scale) if self.scale_judge else self.judge)(summary)


FIGURES = {
    "fig3": Figure("BERT vs ALBERT (random init): test accuracy per variable, n = 12, n_tr = 6 (bottom) and 12 (top)",
                   "Both BERT and ALBERT generalise classically; only ALBERT extrapolates beyond the supervised "
                   "variables; with all 12 supervised, #11 is learned early through the parity shortcut.",
                   ["bert", "albert", "bert-ntr12", "albert-ntr12"], judge_fig3,
                   {"cpu": "n_tr = 12 trains three times as long, 24,000 steps evaluated every 750 (on 8,000 no "
                           "seed fit more than #0..#6 of its twelve; on 16,000, 3 of 6 runs fit all twelve)"}),
    "fig5": Figure("ALBERT with stochastic depth 6..12 vs fixed depth 12, both evaluated at depth 12",
                   "Training ALBERT at depths drawn from 6..12 and testing at 12 improves length extrapolation.",
                   ["albert-depth12", "albert-stochastic-depth"], judge_fig5),
    "fig6": Figure("random vs pretrained vs mimicking initialisation",
                   "Pretrained BERT extrapolates much better and sooner than random BERT; mimicking initialisation "
                   "narrows the gap.",
                   ["minilm-random", "minilm-pretrained", "minilm-mimic", "minilm-zero-residual"], judge_fig6,
                   {"cpu": "MiniLM (6 x 384, all-MiniLM-L6-v2's weights) stands in for BERT-base; cpu/minilm's "
                           "3,000 steps of 32 without dropout, with deep and operand supervision, the same for every "
                           "initialisation (the paper: 200 epochs of 120k, no aids, BERT's dropout 0.1); mimicking: "
                           "400 steps of 32 from zeroed residual branches at lr 3e-3 with dropout 0.1 (the public "
                           "code: 1,000 steps of 200 at 5e-5 from BERT's init), hence the zero-residual control"}),
    "fig11": Figure("shortcut: supervising #0..#4 and #11 vs #0..#4",
                    "Models supervised on #0..#4 and #11 generalise worse to the intermediate variables than "
                    "models supervised on #0..#4 only.",
                    ["bert-0to4", "bert-0to4+11", "albert-0to4", "albert-0to4+11"], judge_fig11),
    "fig12": Figure("pretrained and mimicking vs random init, all 12 variables supervised",
                    "Pretrained and mimicking models avoid the shortcut: #11 improves later than or alongside "
                    "the other variables.",
                    ["minilm-random-ntr12", "minilm-pretrained-ntr12", "minilm-mimic-ntr12"], judge_fig12,
                    {"cpu": "MiniLM stands in for pretrained BERT and ALBERT (no ALBERT checkpoint ships offline); "
                            "cpu/minilm's 3,000 steps of 32 without dropout, with deep and operand supervision (on all "
                            "12 variables here)"}),
    "fig15": Figure("chain length n = 8, 12, 16, 20 (CPU scale: up to 16) with n_tr = n - 6",
                    "Longer training chains generalise better: n = 8 learns its training length but not unseen "
                    "ones, n = 20 generalises strongly beyond it.",
                    lambda scale: [f"bert-n{n}" for n in CHAINS[scale]], judge_fig15,
                    {"cpu": "random-init 6-layer BERT (the paper: depth-12 models, pretrained BERT most clearly); "
                            "n = 16 trains three times as long, 24,000 steps evaluated every 750 (on 8,000 it fit "
                            "#0..#2 of its ten in 3 seeds), so its lead over n = 8 and 12 is not of equal budgets; no n = 20 "
                            "(on 24,000 steps it fit #0..#6 of its fourteen, seed 0)"}, scale_judge=True),
    "fig16": Figure("model depth: BERT and ALBERT at several depths, n = 12",
                    "Greater depth improves generalisation for random BERT and ALBERT, with a depth threshold "
                    "below n.",
                    lambda scale: [f"{a}-depth{d}" for a in ("bert", "albert") for d in DEPTHS[scale]],
                    judge_fig16, {"cpu": "depths 2, 4, 6, 8 (the paper: up to 12)"}, scale_judge=True),
    "fig17": Figure("thin BERT with ALBERT's parameter count vs ALBERT",
                    "At matched parameter count a thin BERT lacks ALBERT's extrapolation and in-distribution "
                    "generalisation: its #2 stays near 50%.",
                    ["bert-thin", "albert", "bert"], judge_fig17,
                    {"cpu": "thin BERT 28 wide (d_ff 84): 50,570 parameters without embeddings, ALBERT 50,882",
                     "paper": "thin BERT 96 wide as in the paper (1.34M parameters without embeddings; "
                              "ALBERT-base has 7.19M)"}),
    "fig18": Figure("Task 2 (D3): BERT, ALBERT, mimicking BERT",
                    "On Task 2 mimicking helps at least as much as pretraining, and no model generalises "
                    "non-trivially beyond one extra variable.",
                    ["d3-bert", "d3-albert", "d3-mimic-bert", "d3-zero-residual-bert"], judge_fig18,
                    {"cpu": "cpu/bert-d3's recipe (aids for 6,000 steps, 16,000 steps); no pretrained run"}),
    "lego-attention": Figure("BERT vs LEGO attention v0 / v1 vs identity-scaled BERT on Task 1",
                             "Not a figure of the paper: section 5 calls LEGO attention \"faster and better\" than BERT's attention "
                             "in pretraining; this asks the same of Task 1 itself.",
                             ["bert", "lego-v0", "lego-v1", "identity-scaled"], judge_lego_attention),
}
# computed from other figures' runs or without training runs: legolab.reproduce.analyses
ANALYSES = {
    "fig4": "per-layer probes of the fig3 runs (n_tr = 6), every seed",
    "fig7": "attention head scores of pretrained MiniLM before fine-tuning, and of the fig6 runs",
    "fig9": "inference FLOPs, size and latency: BERT vs LEGO v0 vs v1",
    "fig10": "masked-LM pretraining: BERT vs LEGO v0 vs v1 validation loss",
    "templates": "seed 004: test error on unseen symbols vs training samples, standard vs identity-scaled attention",
    "listops": "seed 002: ListOps accuracy per operator, each operator trained alone vs MAX + MED + SM jointly",
}
ANALYSIS_CLAIMS = {
    "fig4": "ALBERT extrapolates as soon as it fits its training variables, and probes suggest its layer-wise "
            "information flow is closer to linear (a for loop) than BERT's.",
    "fig7": "Pretrained BERT's heads implement global association between occurrences of the same token or "
            "local, convolution-like manipulation: almost every head is one or the other.",
    "fig9": "LEGO attention v1 (and v0) reduce model size and inference FLOPs against BERT-base.",
    "fig10": "In masked-LM pretraining LEGO v1 ends slightly below BERT (1.47 vs 1.49 validation loss); v0 learns "
             "fast at first but ends higher (1.66).",
    "templates": "Seed 004: with identity-scaled attention a transformer learns template tasks on unseen symbols from "
                 "about 16x fewer samples than a standard one.",
    "listops": "Seed 002: sum modulo 10 (SM) is the hardest ListOps operator to learn, and it becomes easier when "
               "trained jointly with MAX and MED.",
}
ORDER = ["fig3", "fig4", "fig5", "fig6", "fig7", "fig9", "fig10", "fig11", "fig12", "fig15", "fig16", "fig17",
         "fig18", "lego-attention", "templates", "listops"]


def check_figure(fig: str) -> None:
    if fig not in FIGURES and fig not in ANALYSES:
        raise LegoError(f"unknown figure {fig!r} (known: all, {', '.join(ORDER)})")
