# Penalised binomial fits for data with separation (analysis/stats/models/binomial.py,
# fit_binomial_penalised). Under separation (a system whose judgments are all "yes", say)
# glmer's maximum-likelihood estimate of that system's log-odds is infinite: the optimiser stops
# somewhere around +20..+30 with a meaningless standard error. A prior (a penalty) on the fixed
# effects keeps the estimates finite.

# blme::bglmer: lme4::glmer plus a normal prior on the fixed effects; the estimate is the
# posterior mode (penalised maximum likelihood, Chung et al. 2013, Psychometrika 78:685).
# `intercept_sd`, `coef_sd`: prior SDs of the intercept and of every other coefficient on the
# log-odds scale. blme's own default normal prior is sd = c(10, 2.5), the scales Gelman et al.
# (2008, Ann. Appl. Stat. 2:1360) recommend for logistic regression. No prior on the
# random-effect covariance (cov.prior = NULL, where bglmer's default is a Wishart prior): only the
# fixed effects, which separation sends to infinity, are penalised, so that the fit differs from
# glmer's by that alone.
evalstudy_bglmer <- function(formula, data, intercept_sd, coef_sd) {
  if (!requireNamespace("blme", quietly = TRUE)) {
    stop("the R package blme is not installed (Debian: apt-get install r-cran-blme)")
  }
  acc <- new.env()
  acc$warns <- character()
  started <- proc.time()[["elapsed"]]
  # blme parses the prior from its text; sprintf's %.17g keeps the SDs exact.
  prior <- sprintf("normal(sd = c(%.17g, %.17g))", intercept_sd, coef_sd)
  fit <- .evalstudy_collect(
    do.call(blme::bglmer, list(formula = stats::as.formula(formula), data = data,
                               family = stats::binomial, fixef.prior = prior,
                               cov.prior = NULL)),
    acc)
  out <- evalstudy_glmer_summary(fit)
  out$warnings <- unique(c(acc$warns, out$warnings))
  out$prior <- prior
  out$blme <- utils::packageDescription("blme")$Version
  out$seconds <- proc.time()[["elapsed"]] - started
  out
}

# brglm2::brglmFit for formulas without random effects (glmer refuses those): logistic
# regression with Firth's (1993, Biometrika 80:27) mean bias reduction (type "AS_mean"), whose
# estimates are finite under separation (Kosmidis & Firth 2021, Biometrika 108:71).
evalstudy_brglm <- function(formula, data) {
  if (!requireNamespace("brglm2", quietly = TRUE)) {
    stop("the R package brglm2 is not installed (Debian: apt-get install r-cran-brglm2)")
  }
  acc <- new.env()
  acc$warns <- character()
  started <- proc.time()[["elapsed"]]
  out <- .evalstudy_collect({
    fit <- do.call(stats::glm, list(formula = stats::as.formula(formula), data = data,
                                    family = stats::binomial("logit"),
                                    method = brglm2::brglmFit, type = "AS_mean"))
    co <- summary(fit)$coefficients
    vc <- as.matrix(stats::vcov(fit))
    list(names = rownames(co), est = unname(co[, 1]), se = unname(co[, 2]),
         p = unname(co[, 4]), vcov = unname(vc), nobs = stats::nobs(fit),
         converged = isTRUE(fit$converged))
  }, acc)
  # brglmFit works on adjusted (non-integer) pseudo-responses, so binomial()'s check always
  # warns about non-integer successes: an artefact of the method, not of the data.
  out$warnings <- setdiff(unique(acc$warns), "non-integer #successes in a binomial glm!")
  out$brglm2 <- utils::packageDescription("brglm2")$Version
  out$seconds <- proc.time()[["elapsed"]] - started
  out
}
