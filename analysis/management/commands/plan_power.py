from django.core.management.base import BaseCommand, CommandError

from analysis.stats import power


class Command(BaseCommand):
    help = (
        "Power by simulation for a planned two-system binary-judgment study, and the smallest "
        "number of items (or raters) reaching a target power. Random-effect SDs can come from "
        "a pilot study's binomial GLMM (--pilot SLUG --criterion KEY)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--raters", type=int, required=True)
        parser.add_argument("--items", type=int, required=True)
        parser.add_argument("--ratings-per-output", type=int, default=1)
        parser.add_argument("--effect", type=float, required=True,
                            help="log-odds difference between the two systems")
        parser.add_argument("--rater-sd", type=float, default=0.0)
        parser.add_argument("--item-sd", type=float, default=0.0)
        parser.add_argument("--baseline", type=float, default=0.0, help="intercept (log-odds)")
        parser.add_argument("--pilot", help="study slug whose GLMM gives the SDs and baseline")
        parser.add_argument("--criterion", help="binary/severity criterion of the pilot")
        parser.add_argument("--target", type=float, help="target power for the design search")
        parser.add_argument("--vary", choices=["items", "raters", "ratings_per_output"],
                            default="items")
        parser.add_argument("--n-sim", type=int, default=1000)
        parser.add_argument("--alpha", type=float, default=0.05)
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args, **o):
        params = {"n_raters": o["raters"], "n_items": o["items"],
                  "ratings_per_output": o["ratings_per_output"], "effect": o["effect"],
                  "rater_sd": o["rater_sd"], "item_sd": o["item_sd"],
                  "baseline": o["baseline"]}
        if o["pilot"]:
            params.update(self._pilot(o["pilot"], o["criterion"]))
        try:
            result = power.power_binary(**params, alpha=o["alpha"], n_sim=o["n_sim"],
                                        seed=o["seed"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"power {result.power:.3f} (95% CI {result.ci_low:.3f}-{result.ci_high:.3f}) with "
            f"{o['raters']} raters, {o['items']} items, {o['ratings_per_output']} ratings per "
            f"output, effect {params['effect']}, rater SD {params['rater_sd']:.3f}, item SD "
            f"{params['item_sd']:.3f} ({o['n_sim']} simulations; test: {result.test})")
        if o["target"]:
            varied = {"items": "n_items", "raters": "n_raters",
                      "ratings_per_output": "ratings_per_output"}[o["vary"]]
            fixed = {k: v for k, v in params.items() if k != varied}
            search = power.smallest_design(o["target"], o["vary"], alpha=o["alpha"],
                                           n_sim=o["n_sim"], seed=o["seed"], **fixed)
            self.stdout.write(f"smallest {o['vary']} reaching power {o['target']}: "
                              f"{search.value if search.value is not None else 'none in range'}")

    def _pilot(self, slug, criterion_key):
        from analysis.selectors import judgments_tidy
        from analysis.stats.models import fit_binomial_glmm
        from analysis.stats.pipeline import binary_label
        from evalstudy.management.base import get_study

        study = get_study(slug)
        criterion = study.criteria.filter(key=criterion_key, kind__in=["binary", "severity"])
        if not criterion_key or not criterion.exists():
            raise CommandError("--pilot needs --criterion naming a binary or severity criterion")
        kind = criterion.get().kind
        frame = judgments_tidy(study)
        frame = frame[(frame["criterion"] == criterion_key) & frame["is_human"]].copy()
        frame["y"] = frame["value"].map(lambda v: binary_label(kind, str(v)))
        fit = fit_binomial_glmm(frame.dropna(subset=["y"]))
        sds = power.sds_from_fit(fit)
        self.stdout.write(f"pilot {slug}: {fit.engine}; " + ", ".join(
            f"{k} {v:.3f}" for k, v in sds.items()))
        return sds
