"""Benchmark: the learned proxies' training time and scoring pairs/s (CPU by default).

What is measured
----------------
``--pairs`` (default 3,000) labelled pairs of the synthetic "meaning preserved?" study that the
tests use (``tests/proxies/learned/synthetic.py``: references of 7-12 words, outputs with
function-word edits, synonyms, unrelated words, deletions, antonyms; labels depend on WER and
on meaning), ``pairs / 3`` references with 3 outputs each. For each proxy kind:

* ``train``: ``proxies.learned.train_proxy(kind, pairs)`` end to end (group split 70/15/15,
  fit, threshold on dev, AUC on the three splits). ``fit s`` is the fit alone
  (``TrainingReport.seconds``: feature extraction of train and dev included for the
  regressions; all epochs and the per-epoch dev evaluation for the cross-encoder) and
  ``fit pairs/s`` is training pairs x epochs (1 for the regressions) per fit second.
* ``score``: ``TrainedProxy.predict_proba`` on ``--pairs`` NEW pairs (another seed, so other
  references), starting from an empty encoder cache: every text is encoded as in a real run.

The shared encoder (the regressions' features) is loaded before any timing and its load time
printed apart; the cross-encoder's fit includes reading its base weights (about 0.3 s).
Cross-encoder settings are the library's defaults (3 epochs, batch 16, max_length 128,
lr 1e-4) unless ``--epochs`` / ``--max-length`` say otherwise.

Run: ``.venv/bin/python bench/judges_learned.py [--pairs 3000 --kinds wer_bertscore,...
--device cpu|cuda --epochs 3 --max-length 128 --seed 0 --smoke]``. No Django, no database.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and bench/metrics.py would
# shadow the project's `metrics` package: put the project root first instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

KINDS = ("wer_bertscore", "wer_bertscore+extra", "embedding_lr", "cross_encoder")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3000,
                        help="labelled pairs to train on, and new pairs to score (3,000)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated, from {', '.join(KINDS)}")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--epochs", type=int, default=None, help="cross-encoder epochs")
    parser.add_argument("--max-length", type=int, default=None,
                        help="cross-encoder tokens per pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true",
                        help="60 pairs, wer_bertscore and one cross-encoder epoch of 32 tokens "
                             "(for make test)")
    args = parser.parse_args(argv)
    if args.smoke:  # one regression and the fine-tuned cross-encoder: the two code paths
        args.pairs, args.epochs, args.max_length = 60, 1, 32
        args.kinds = "wer_bertscore,cross_encoder"
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s) {unknown}; choose from {', '.join(KINDS)}")
    if args.pairs < 60:
        parser.error("--pairs must be at least 60 (20 references)")
    args.kinds = kinds
    return args


def _params(kind: str, args: argparse.Namespace) -> tuple[str, dict]:
    if kind == "wer_bertscore+extra":
        return "wer_bertscore", {"extra": ("sd", "heval"), "device": args.device}
    params: dict = {"device": args.device}
    if kind == "cross_encoder":
        if args.epochs is not None:
            params["epochs"] = args.epochs
        if args.max_length is not None:
            params["max_length"] = args.max_length
    return kind, params


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch
    from sklearn.metrics import roc_auc_score

    from metrics.scorers.encoder import encoder_resolve, get_encoder
    from proxies.learned import train_proxy
    from tests.proxies.learned.synthetic import make_synthetic_study

    references = args.pairs // 3
    train_pairs = make_synthetic_study(references, 3, seed=args.seed)
    seen = {e.reference for e in train_pairs}
    new_pairs = [e for e in make_synthetic_study(2 * references, 3, seed=args.seed + 1)
                 if e.reference not in seen][:len(train_pairs)]

    print(f"machine:    {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), device {args.device}")
    print(f"pairs:      {len(train_pairs)} to train ({references} references x 3), "
          f"{len(new_pairs)} new ones to score")
    load_before = os.getloadavg()[0]

    started = time.perf_counter()
    encoder = get_encoder(encoder_resolve(), args.device)
    encoder.model  # noqa: B018 - load the weights before timing
    print(f"load:       encoder {time.perf_counter() - started:.2f} s")

    rows = []
    for kind in args.kinds:
        base_kind, params = _params(kind, args)
        encoder.clear()
        started = time.perf_counter()
        trained = train_proxy(base_kind, train_pairs, params=params, seed=args.seed)
        total = time.perf_counter() - started
        report = trained.report
        epochs = len(report.details.get("history", [])) or 1  # the regressions: one pass
        encoder.clear()
        started = time.perf_counter()
        probabilities = trained.predict_proba(new_pairs)
        scoring = time.perf_counter() - started
        new_auc = roc_auc_score([e.label for e in new_pairs], probabilities)
        rows.append({
            "kind": kind, "n_train": report.n_train, "fit": report.seconds, "total": total,
            "fit_rate": report.n_train * epochs / report.seconds, "n_score": len(new_pairs),
            "score": scoring, "score_rate": len(new_pairs) / scoring,
            "test_auc": trained.metrics["auc"]["test"]["value"], "new_auc": new_auc,
            "detail": (f"best epoch {report.details['best_epoch']} of {epochs}"
                       if "best_epoch" in report.details else f"C={report.details['C']:g}"),
        })
        print(f"done:       {kind} ({rows[-1]['detail']})", flush=True)
    load_after = os.getloadavg()[0]

    header = (f"| {'proxy':<21} | train pairs | fit s | train_proxy s | fit pairs/s | "
              f"score pairs | score s | score pairs/s | test AUC | new AUC |")
    print()
    print(header)
    print("|" + "|".join("-" * (len(cell) + 0) for cell in header.split("|")[1:-1]) + "|")
    for r in rows:
        print(f"| {r['kind']:<21} | {r['n_train']:>11,} | {r['fit']:>5.1f} | "
              f"{r['total']:>13.1f} | {r['fit_rate']:>11,.0f} | {r['n_score']:>11,} | "
              f"{r['score']:>7.2f} | {r['score_rate']:>13,.0f} | {r['test_auc']:>8.3f} | "
              f"{r['new_auc']:>7.3f} |")
    print()
    print(f"load average (1 min): {load_before:.2f} before, {load_after:.2f} after "
          f"({os.cpu_count()} CPUs)")
    if args.smoke:
        print("smoke: tiny sizes, no goal")


if __name__ == "__main__":
    main()
