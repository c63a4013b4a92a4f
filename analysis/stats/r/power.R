# R side of analysis/stats/power.py: refits the analysis model to a chunk of simulated studies
# (Python simulates them, one seed per study, so that the result does not depend on how the
# simulations are cut into chunks, nor on R's random number generator).

# `data`: the chunk's studies stacked, with a `sim` column (the simulation's index), `system`
# (a factor whose first level is the reference), integer `rater` and `item` ids, and the
# response: `y` (0/1) for model "glmer", `rating` (integer categories) for model "clmm".
# `formula`: the analysis model; `term`: the coefficient tested (Wald z, as the report's).
# `nonconvergence`: the regular expression (case-insensitive) of messages that mark a fit as
# not converged, shared with analysis/stats/models/binomial.py. `cores` > 1 fits in forked processes
# (parallel::mclapply; the results do not depend on it).
# Returns one entry per simulation, in the order of `sim`: estimate, SE, p, whether the fit
# failed (error, non-convergence or a non-finite SE), whether it was singular, and the first
# message that marked a failure.
evalstudy_power_refit <- function(data, model, formula, term, nonconvergence, cores = 1L) {
  started <- proc.time()[["elapsed"]]
  f <- stats::as.formula(formula)
  parts <- split(data, data$sim)
  fit_one <- function(part) {
    part$rater <- factor(part$rater)
    part$item <- factor(part$item)
    part$system <- droplevels(part$system)
    msgs <- character()
    # The fit and its summary (which warns when lme4 falls back to an approximate covariance
    # matrix) under one handler: every message counts, as in models.R.
    res <- tryCatch(withCallingHandlers({
      if (model == "glmer") {
        fit <- lme4::glmer(f, data = part, family = stats::binomial)
        msgs <- c(msgs, as.character(fit@optinfo$conv$lme4$messages))
        singular <- lme4::isSingular(fit)
      } else {
        part$rating <- factor(part$rating, levels = sort(unique(part$rating)), ordered = TRUE)
        fit <- ordinal::clmm(f, data = part)
        if (fit$optRes$convergence != 0) {
          msgs <- c(msgs, paste("convergence code", fit$optRes$convergence))
        }
        vc <- ordinal::VarCorr(fit)
        singular <- any(vapply(vc, function(m) min(diag(as.matrix(m))), 0) < 1e-6)
      }
      list(co = summary(fit)$coefficients, singular = singular)
    },
    warning = function(w) {
      msgs <<- c(msgs, conditionMessage(w))
      invokeRestart("muffleWarning")
    },
    message = function(m) {
      msgs <<- c(msgs, trimws(conditionMessage(m)))
      invokeRestart("muffleMessage")
    }), error = function(e) e)
    if (inherits(res, "error")) {
      return(list(NA_real_, NA_real_, NA_real_, TRUE, FALSE,
                  paste("error:", conditionMessage(res))))
    }
    co <- res$co
    if (!term %in% rownames(co)) {
      return(list(NA_real_, NA_real_, NA_real_, TRUE, res$singular,
                  paste("no coefficient", term, "(a system was not observed)")))
    }
    se <- co[term, 2]
    bad <- msgs[grepl(nonconvergence, msgs, ignore.case = TRUE)]
    failed <- length(bad) > 0L || !is.finite(se)
    why <- if (length(bad)) bad[[1L]] else if (!is.finite(se)) "non-finite standard error" else ""
    list(co[term, 1], se, co[term, ncol(co)], failed, res$singular, why)
  }
  res <- if (cores > 1L && length(parts) > 1L) {
    parallel::mclapply(parts, fit_one, mc.cores = cores, mc.preschedule = FALSE)
  } else {
    lapply(parts, fit_one)
  }
  # A forked process that died returns a try-error, not a list: that simulation failed.
  res <- lapply(res, function(r) if (is.list(r)) r else
    list(NA_real_, NA_real_, NA_real_, TRUE, FALSE, paste("error:", as.character(r))))
  pick <- function(k, type) unname(vapply(res, function(r) r[[k]], type))
  list(sim = as.integer(names(parts)), estimate = pick(1L, 0), se = pick(2L, 0),
       p = pick(3L, 0), failed = pick(4L, TRUE), singular = pick(5L, TRUE),
       message = pick(6L, ""), seconds = proc.time()[["elapsed"]] - started)
}
