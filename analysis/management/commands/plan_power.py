from django.core.management.base import BaseCommand, CommandError

from analysis.stats import power


class Command(BaseCommand):
    help = (
        "Power by simulation for a planned two-system study, and the smallest number of items "
        "(or raters) reaching a target power. Each simulated study is refitted with the "
        "analysis's model: the binomial GLMM for binary judgments (--test glmm, default), the "
        "cumulative link mixed model for Likert ratings (--thresholds or a Likert pilot; "
        "--test clmm); --test paired_t is a fast screen that refits nothing. Variance "
        "components can come from a pilot study's fit (--pilot SLUG --criterion KEY)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--raters", type=int, required=True)
        parser.add_argument("--items", type=int, required=True)
        parser.add_argument("--ratings-per-output", type=int, default=1)
        parser.add_argument("--effect", type=float, required=True,
                            help="difference B - A on the model's scale (log-odds for binary "
                                 "judgments, latent logit for Likert ratings)")
        parser.add_argument("--rater-sd", type=float, default=0.0)
        parser.add_argument("--item-sd", type=float, default=0.0)
        parser.add_argument("--baseline", type=float, default=0.0, help="intercept (log-odds)")
        parser.add_argument("--thresholds", help="Likert: comma-separated increasing cut points "
                            "of the cumulative logit model (K-1 for ratings 1..K)")
        parser.add_argument("--pilot", help="study slug whose fitted model gives the SDs and "
                            "the intercept (binary) or thresholds (Likert)")
        parser.add_argument("--criterion", help="binary, severity or likert criterion of the "
                            "pilot")
        parser.add_argument("--target", type=float, help="target power for the design search")
        parser.add_argument("--vary", choices=["items", "raters", "ratings_per_output"],
                            default="items")
        parser.add_argument("--test", choices=power.TESTS,
                            help="glmm (binary) / clmm (Likert): refit the analysis model "
                                 "(default); paired_t: fast screen without a refit")
        parser.add_argument("--n-sim", type=int, default=1000)
        parser.add_argument("--n-sim-per-step", type=int,
                            help="simulations per step of the design search (default: fewer "
                                 "than --n-sim for model refits; the chosen design is then "
                                 "evaluated with --n-sim)")
        parser.add_argument("--alpha", type=float, default=0.05)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--chunk-size", type=int, help="simulations per R request")
        parser.add_argument("--cores", type=int, default=1,
                            help="R processes refitting each chunk (the result is the same)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, **o):
        params = {"n_raters": o["raters"], "n_items": o["items"],
                  "ratings_per_output": o["ratings_per_output"], "effect": o["effect"],
                  "rater_sd": o["rater_sd"], "item_sd": o["item_sd"]}
        if o["thresholds"]:
            try:
                params["thresholds"] = [float(t) for t in o["thresholds"].split(",")]
            except ValueError:
                raise CommandError("--thresholds: comma-separated numbers") from None
        else:
            params["baseline"] = o["baseline"]
        pilot = None
        if o["pilot"]:
            found, pilot = self._pilot(o["pilot"], o["criterion"])
            if "thresholds" in found:
                params.pop("baseline", None)
            params.update(found)
        likert = "thresholds" in params
        run = {"alpha": o["alpha"], "seed": o["seed"], "chunk_size": o["chunk_size"],
               "cores": o["cores"], "test": o["test"] or ("clmm" if likert else "glmm"),
               "pilot": pilot}
        fn = power.power_likert if likert else power.power_binary
        try:
            if not o["target"]:
                with self._bar(o, "power") as progress:
                    result = fn(**params, **run, n_sim=o["n_sim"], progress=progress)
                self._report(result, o)
                return
            varied = {"items": "n_items", "raters": "n_raters",
                      "ratings_per_output": "ratings_per_output"}[o["vary"]]
            start = params.pop(varied)
            with self._bar(o, "design search") as progress:
                # from the planned design (evaluated with --n-sim): halving or doubling it
                # brackets the answer
                search = power.smallest_design(
                    o["target"], o["vary"], start=start, hi=max(1000, start), n_sim=o["n_sim"],
                    n_sim_per_step=o["n_sim_per_step"], progress=progress, **run, **params)
        except ValueError as error:
            raise CommandError(str(error)) from None
        self._report(search.evaluated[start], o)
        self.stdout.write(
            f"smallest {o['vary']} reaching power {o['target']}: "
            f"{search.value if search.value is not None else 'none in range'}"
            f" (search: {len(search.evaluated)} designs, at most {search.n_sim_per_step} "
            f"simulations each; {search.elapsed_s:.1f} s)")
        if search.result is not None and search.value != start:
            self._report(search.result, o)
        for warning in search.warnings:
            self.stdout.write(f"warning: {warning}")

    def _report(self, result, o):
        d = result.design
        self.stdout.write(
            f"power {result.power:.3f} ({result.conf_level:.0%} CI {result.ci_low:.3f}-"
            f"{result.ci_high:.3f}) with {d['n_raters']} raters, {d['n_items']} items, "
            f"{d['ratings_per_output']} ratings per output, effect {d['effect']}, rater SD "
            f"{d['rater_sd']:.3f}, item SD {d['item_sd']:.3f} ({result.n_sim} simulations, "
            f"seed {result.seed}; test: {result.test})")
        self.stdout.write(f"  model: {result.model}")
        self.stdout.write(f"  engine: {result.engine}; {result.elapsed_s:.1f} s "
                          f"({result.seconds_per_simulation:.3f} s per simulation)")
        if result.test in power.MODEL_TESTS:
            conv = ("n/a" if result.power_converged is None
                    else f"{result.power_converged:.3f}")
            self.stdout.write(f"  failed refits: {result.n_failed} of {result.n_sim} "
                              f"({result.failed_policy}); power among the others {conv}; "
                              f"singular fits: {result.n_singular}")
        for warning in result.warnings:
            self.stdout.write(f"  warning: {warning}")

    def _bar(self, o, what):
        import contextlib

        if o["no_progress"]:
            return contextlib.nullcontext(None)

        @contextlib.contextmanager
        def bar():
            from tqdm import tqdm

            # the raw stream: Django's wrapper would end each redraw with a newline
            with tqdm(total=0, unit="sim", desc=what, file=self.stderr._out,
                      leave=False) as progress_bar:
                def update(done, total):
                    progress_bar.total = total
                    progress_bar.update(done - progress_bar.n)

                yield update

        return bar()

    def _pilot(self, slug, criterion_key):
        import pandas as pd

        from analysis.selectors import judgments_tidy
        from analysis.stats.models import fit_binomial_glmm, fit_clmm
        from evalstudy.criteria import binary_label
        from evalstudy.management.base import get_study

        study = get_study(slug)
        criterion = study.criteria.filter(key=criterion_key, kind__in=power.PILOT_KINDS)
        if not criterion_key or not criterion.exists():
            raise CommandError("--pilot needs --criterion naming a binary, severity or likert "
                               "criterion")
        criterion = criterion.get()
        frame = judgments_tidy(study)
        frame = frame[(frame["criterion"] == criterion_key) & frame["is_human"]].copy()
        if power.pilot_model(criterion.kind) == "clmm":
            frame["rating"] = pd.to_numeric(frame["value"], errors="coerce")
            levels = {"rating": list(range(1, int(criterion.scale_points or 5) + 1))}
            fit = fit_clmm(frame.dropna(subset=["rating"]), levels=levels)
        else:
            frame["y"] = frame["value"].map(lambda v: binary_label(criterion.kind, str(v)))
            fit = fit_binomial_glmm(frame.dropna(subset=["y"]))
        params, pilot = power.pilot_from_fit(fit)
        pilot.update(study=slug, criterion=criterion_key)
        shown = ", ".join(f"{k} {v:.3f}" for k, v in params.items() if k != "thresholds")
        if "thresholds" in params:
            shown += ", thresholds " + ", ".join(f"{t:.3f}" for t in params["thresholds"])
        self.stdout.write(f"pilot {slug}: {fit.engine}; {shown}")
        for warning in pilot["warnings"]:
            self.stdout.write(f"  pilot warning: {warning}")
        return params, pilot
