"""Drawing the seed papers' figures from an experiment's CSV files (docs/experiments.md).

The notebooks call `draw(folder)` for each experiment of their paper. Everything drawn is read
from the experiment's spec.json, results.csv (predicted, written by `stagecraft experiment run`)
and compare.csv (published beside predicted, with the error); nothing here computes a
prediction or an error.

Environment: STAGECRAFT_FIGURES_OUT, the folder the PNGs go to (default docs/figures).
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPERS = {"merak": "Merak", "oases": "Oases", "hanayo": "Hanayo", "fold3d": "FOLD3D"}


def out_dir():
    d = os.environ.get("STAGECRAFT_FIGURES_OUT", os.path.join(ROOT, "docs", "figures"))
    os.makedirs(d, exist_ok=True)
    return d


def experiments(paper):
    """The experiment folders of one paper, sorted (the folders holding a spec.json)."""
    base = os.path.join(ROOT, "experiments", paper)
    return sorted(os.path.join(base, d) for d in os.listdir(base) if os.path.exists(os.path.join(base, d, "spec.json")))


def load(folder):
    with open(os.path.join(folder, "spec.json")) as f:
        spec = json.load(f)
    for name in ("results.csv", "compare.csv"):
        if not os.path.exists(os.path.join(folder, name)):
            raise FileNotFoundError(f"{folder}/{name} is missing: run `stagecraft experiment run {folder}` first")
    results = pd.read_csv(os.path.join(folder, "results.csv"), dtype={"x": str, "choice": str}, keep_default_na=False)
    compare = pd.read_csv(os.path.join(folder, "compare.csv"), dtype={"x": str, "same_order": str}, keep_default_na=False)
    return spec, results, compare


def _axis_values(spec, results, compare):
    xs = [str(p["x"]) for p in spec["x"]["points"]]
    series = [s["name"] for s in spec["series"]]
    return xs, series


def _draw_values(ax, spec, results, compare):
    """The metric per x and series, predicted (filled) beside published (hatched), as the paper draws it."""
    xs, series = _axis_values(spec, results, compare)
    published = compare[compare["quantity"] == "value"]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if spec.get("plot", "bar") == "line":
        pos = range(len(xs))
        for i, s in enumerate(series):
            r = results[results["series"] == s].set_index("x").reindex(xs)
            ax.plot(pos, r["predicted"], "-o", color=colours[i % len(colours)], label=f"{s} (predicted)")
            p = published[published["series"] == s]
            if len(p):
                px = [xs.index(x) for x in p["x"] if x in xs]
                ax.plot(px, [v for x, v in zip(p["x"], p["paper"]) if x in xs], "--s", mfc="none",
                        color=colours[i % len(colours)], label=f"{s} (published)")
        ax.set_xticks(list(pos))
        ax.set_xticklabels(xs)
    else:
        have_paper = set(published["series"])
        slots = sum(2 if s in have_paper else 1 for s in series)
        width = 0.8 / slots
        k = 0
        for i, s in enumerate(series):
            c = colours[i % len(colours)]
            r = results[results["series"] == s].set_index("x").reindex(xs)
            ax.bar([j - 0.4 + (k + 0.5) * width for j in range(len(xs))], r["predicted"], width, color=c,
                   label=f"{s} (predicted)")
            k += 1
            if s in have_paper:
                p = published[published["series"] == s].set_index("x").reindex(xs)
                bars = ax.bar([j - 0.4 + (k + 0.5) * width for j in range(len(xs))], p["paper"], width, color="white",
                              edgecolor=c, hatch="//", label=f"{s} (published)")
                for b, e in zip(bars, p["error"]):
                    if e == e:  # not NaN: a published value at this x
                        ax.annotate(f"{100 * e:+.0f}%", (b.get_x() + b.get_width() / 2, b.get_height()),
                                    ha="center", va="bottom", fontsize=6)
                k += 1
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels(xs, rotation=30 if max(len(x) for x in xs) > 6 else 0, ha="right" if max(len(x) for x in xs) > 6 else "center")
    ax.set_xlabel(spec.get("xlabel") or spec["x"].get("label", ""))
    ax.set_ylabel(spec.get("ylabel") or f"{spec['metric']} ({spec.get('unit', '')})")
    ax.legend(fontsize=6, ncol=2)


def _draw_ratios(ax, compare):
    """Every ratio the paper states (who beats whom), published beside predicted, with the error."""
    ratios = compare[compare["quantity"] != "value"].reset_index(drop=True)
    labels = [f"{r.series} {r.quantity.replace('over:', '/ ').replace('over_x:', '/ x=')} @ {r.x}" for r in ratios.itertuples()]
    pos = range(len(ratios))
    ax.barh([p + 0.2 for p in pos], ratios["paper"], 0.4, color="white", edgecolor="black", hatch="//", label="published")
    ax.barh([p - 0.2 for p in pos], ratios["predicted"], 0.4, color="tab:blue", label="predicted")
    for p, r in zip(pos, ratios.itertuples()):
        mark = "" if r.same_order == "yes" else "  order differs"
        ax.annotate(f"{100 * r.error:+.0f}%{mark}", (max(r.paper, r.predicted), p), xytext=(3, -3),
                    textcoords="offset points", fontsize=6)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_yticks(list(pos))
    ax.set_yticklabels(labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (1 = equal)")
    ax.legend(fontsize=6)


def draw(folder):
    """Draws one experiment to <out>/<paper>-<folder>.png and returns (path, compare table)."""
    spec, results, compare = load(folder)
    n_ratio = int((compare["quantity"] != "value").sum())
    fig, axes = plt.subplots(1, 2 if n_ratio else 1, figsize=(13 if n_ratio else 8, max(3.5, 0.25 * n_ratio + 1.5)),
                             gridspec_kw={"width_ratios": [3, 2]} if n_ratio else None, squeeze=False)
    _draw_values(axes[0][0], spec, results, compare)
    if n_ratio:
        _draw_ratios(axes[0][1], compare)
    fig.suptitle(f"{PAPERS[spec['paper']]} {spec['figure']}: {spec.get('title', '')}", fontsize=9, wrap=True)
    fig.tight_layout()
    path = os.path.join(out_dir(), f"{spec['paper']}-{os.path.basename(os.path.normpath(folder))}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, compare[["series", "x", "quantity", "paper", "predicted", "error", "same_order", "source"]]
