# R side of analysis/stats/models/ (ordinal.py, binomial.py): the functions its R engines call
# through rbridge.
# Each returns a named list of plain vectors (encoded to JSON by server.R) and collects R's
# warnings and messages itself, in `warnings`, so that they stay attached to the fit.

# Collects the warnings and messages of `expr` (evaluated in the caller) into
# `sink_env$warns` and returns its value.
.evalstudy_collect <- function(expr, sink_env) {
  withCallingHandlers(expr,
    warning = function(w) {
      sink_env$warns <- c(sink_env$warns, conditionMessage(w))
      invokeRestart("muffleWarning")
    },
    message = function(m) {
      sink_env$warns <- c(sink_env$warns, trimws(conditionMessage(m)))
      invokeRestart("muffleMessage")
    })
}

# lme4's scaled gradient (its check.conv.grad): max of min(|solve(chol(H), g)|, |g|), NA
# where the Hessian cannot be factored. The convergence label reads it beside the code.
.evalstudy_scaled_gradient <- function(gradient, hessian) {
  if (is.null(hessian) || is.null(gradient)) return(NA_real_)
  tryCatch(max(pmin(abs(solve(chol(hessian), gradient)), abs(gradient))),
           error = function(e) NA_real_)
}

# ordinal::clmm (mixed = TRUE) or ordinal::clm, plus nominal_test for clm when asked.
# `seconds`: the fit, summaries and test, timed in R.
# `data`'s response is an ordered factor whose levels Python chose (rbridge.make_factors).
evalstudy_ordinal <- function(formula, data, link, mixed, nominal) {
  acc <- new.env()
  acc$warns <- character()
  started <- proc.time()[["elapsed"]]
  out <- .evalstudy_collect({
    f <- stats::as.formula(formula)
    fitter <- if (mixed) ordinal::clmm else ordinal::clm
    # do.call embeds the data in the call, so that update() (nominal_test) finds it.
    fit <- do.call(fitter, list(formula = f, data = data, link = link))
    s <- summary(fit)
    co <- s$coefficients
    vc <- as.matrix(stats::vcov(fit))
    out <- list(
      names = rownames(co), est = unname(co[, 1]), se = unname(co[, 2]),
      p = unname(co[, ncol(co)]),
      alpha = names(fit$alpha), beta = names(fit$beta)[!is.na(fit$beta)],
      vcov = unname(vc), vcov_names = rownames(vc),
      nobs = length(fit$fitted.values),
      loglik = as.numeric(stats::logLik(fit)), aic = stats::AIC(fit),
      maxgrad = max(abs(fit$gradient)),
      scaled_gradient = .evalstudy_scaled_gradient(fit$gradient, fit$Hessian)
    )
    if (mixed) {
      vcr <- ordinal::VarCorr(fit)
      g <- character(); nm <- character(); v <- numeric()
      for (gr in names(vcr)) {
        m <- as.matrix(vcr[[gr]])
        g <- c(g, rep(gr, nrow(m))); nm <- c(nm, rownames(m)); v <- c(v, diag(m))
      }
      out$re_group <- g; out$re_name <- nm; out$re_var <- unname(v)
      out$ngrps <- unname(unlist(fit$dims$nlev.gf))
      out$ngrps_names <- names(fit$dims$nlev.gf)
      out$conv_code <- as.integer(fit$optRes$convergence)
      out$conv_msg <- as.character(fit$optRes$message)
      out$cond_h <- if (is.null(s$condHess)) NA_real_ else as.numeric(s$condHess)
    } else {
      out$conv_code <- as.integer(fit$convergence$code)
      out$conv_msg <- paste(c(fit$convergence$messages, fit$convergence$alg.message),
                            collapse = "; ")
      out$cond_h <- as.numeric(fit$cond.H)
      if (nominal) {
        nt <- tryCatch(as.data.frame(ordinal::nominal_test(fit)),
                       error = function(e) {
                         acc$warns <- c(acc$warns, paste("nominal_test failed:",
                                                         conditionMessage(e)))
                         NULL
                       })
        if (!is.null(nt)) {
          out$nt_terms <- rownames(nt); out$nt_df <- as.numeric(nt[[1]])
          out$nt_loglik <- as.numeric(nt[[2]]); out$nt_aic <- as.numeric(nt[[3]])
          out$nt_lrt <- as.numeric(nt[[4]]); out$nt_p <- as.numeric(nt[[5]])
          out$nt_reason <- .evalstudy_nominal_reasons(fit, out$nt_terms, out$nt_p)
        }
      }
    }
    out
  }, acc)
  out$warnings <- unique(acc$warns)
  out$seconds <- proc.time()[["elapsed"]] - started
  out
}

# lme4::glmer with the binomial family (Laplace). The response is a 0/1 column or
# cbind(successes, failures) of two columns. `seconds`: the fit and summaries, timed in R.
evalstudy_glmer <- function(formula, data) {
  acc <- new.env()
  acc$warns <- character()
  started <- proc.time()[["elapsed"]]
  fit <- .evalstudy_collect(
    do.call(lme4::glmer, list(formula = stats::as.formula(formula), data = data,
                              family = stats::binomial)),
    acc)
  out <- evalstudy_glmer_summary(fit)
  out$warnings <- unique(c(acc$warns, out$warnings))
  out$seconds <- proc.time()[["elapsed"]] - started
  out
}

# What analysis/stats/models/binomial.py reads from a fitted glmerMod (also run by the optional
# pymer4 engine on pymer4's model object, in pymer4's own embedded R).
# The coefficient table is summary.merMod's, computed as it does (lme4 1.1-31: SEs from
# vcov(fit), z = estimate / SE, p = 2 pnorm(-|z|)) without summary() itself, which also
# computes Pearson residuals, the correlation of the fixed effects and more that nothing here
# reads (25-40 ms per fit, 5-8 % of a 5,000-judgment glmer).
evalstudy_glmer_summary <- function(fit) {
  acc <- new.env()
  acc$warns <- character()
  out <- .evalstudy_collect({
    est <- lme4::fixef(fit)
    vc <- as.matrix(stats::vcov(fit))
    se <- sqrt(diag(vc))
    z <- est / se
    vcr <- as.data.frame(lme4::VarCorr(fit))
    vcr <- vcr[is.na(vcr$var2), ]
    list(names = names(est), est = unname(est), se = unname(se),
         p = unname(2 * stats::pnorm(abs(z), lower.tail = FALSE)), vcov = unname(vc),
         re_group = as.character(vcr$grp), re_name = as.character(vcr$var1),
         re_var = as.numeric(vcr$vcov),
         ngrps = as.numeric(lme4::ngrps(fit)), ngrps_names = names(lme4::ngrps(fit)),
         nobs = stats::nobs(fit), loglik = as.numeric(stats::logLik(fit)),
         aic = stats::AIC(fit), conv = as.character(fit@optinfo$conv$lme4$messages),
         singular = lme4::isSingular(fit),
         # The optimiser's own code and lme4's gradient (the convergence label's inputs).
         conv_opt = if (is.null(fit@optinfo$conv$opt)) NA_integer_
                    else as.integer(fit@optinfo$conv$opt),
         max_gradient = if (is.null(fit@optinfo$derivs)) NA_real_
                        else max(abs(fit@optinfo$derivs$gradient)),
         scaled_gradient = if (is.null(fit@optinfo$derivs)) NA_real_
                           else .evalstudy_scaled_gradient(fit@optinfo$derivs$gradient,
                                                           fit@optinfo$derivs$Hessian))
  }, acc)
  out$warnings <- unique(acc$warns)
  out
}

# Why nominal_test left a term untested (its LRT is NA): nominal_test drops a term's row when
# the model with that term nominal fails or does not converge, and says nothing more. Refits
# that model the way nominal_test does and returns its error or convergence message, per row
# of the test ("" where the term was tested, and for the "<none>" row).
.evalstudy_nominal_reasons <- function(fit, terms, p) {
  vapply(seq_along(terms), function(i) {
    if (i == 1L || !is.na(p[[i]])) return("")
    nfit <- tryCatch(
      suppressWarnings(stats::update(fit, nominal = stats::as.formula(paste("~", terms[[i]])),
                                     convergence = "silent")),
      error = function(e) e)
    if (inherits(nfit, "error")) {
      return(paste("the model with a nominal", terms[[i]], "effect could not be fitted:",
                   conditionMessage(nfit)))
    }
    conv <- nfit$convergence
    if (conv$code < 0) {
      msg <- paste(unique(c(conv$messages, conv$alg.message)), collapse = "; ")
      return(paste("the model with a nominal", terms[[i]], "effect did not converge:", msg))
    }
    if (is.na(nfit$logLik)) return("the nominal model's log-likelihood is not available")
    "the likelihood-ratio test is undefined (the nominal model adds no parameters)"
  }, "")
}

# A linear mixed model for continuous scores (sliders, direct assessment): lmerTest::lmer
# (REML; lme4's fit, with Satterthwaite degrees of freedom for each fixed effect's t test).
# Without a random term the formula is an ordinary linear model (stats::lm). `seconds`: the
# fit and summaries, timed in R. The residual variance comes back as `sigma2`, apart from the
# random effects.
evalstudy_lmer <- function(formula, data) {
  acc <- new.env()
  acc$warns <- character()
  started <- proc.time()[["elapsed"]]
  f <- stats::as.formula(formula)
  mixed <- !is.null(lme4::findbars(f))
  fit <- .evalstudy_collect(
    if (mixed) do.call(lmerTest::lmer, list(formula = f, data = data, REML = TRUE))
    else do.call(stats::lm, list(formula = f, data = data)),
    acc)
  out <- .evalstudy_collect({
    co <- summary(fit)$coefficients
    vc <- as.matrix(stats::vcov(fit))
    out <- list(names = rownames(co), est = unname(co[, 1]), se = unname(co[, 2]),
                nobs = stats::nobs(fit), loglik = as.numeric(stats::logLik(fit)),
                aic = stats::AIC(fit), vcov = unname(vc), mixed = mixed)
    if (mixed) {
      out$df <- unname(co[, "df"]); out$p <- unname(co[, ncol(co)])
      vcr <- as.data.frame(lme4::VarCorr(fit))
      vcr <- vcr[is.na(vcr$var2), ]
      resid <- vcr$grp == "Residual"
      out$sigma2 <- as.numeric(vcr$vcov[resid])
      vcr <- vcr[!resid, ]
      out$re_group <- as.character(vcr$grp); out$re_name <- as.character(vcr$var1)
      out$re_var <- as.numeric(vcr$vcov)
      out$ngrps <- as.numeric(lme4::ngrps(fit)); out$ngrps_names <- names(lme4::ngrps(fit))
      out$conv <- as.character(fit@optinfo$conv$lme4$messages)
      out$singular <- lme4::isSingular(fit)
      out$reml <- as.numeric(lme4::REMLcrit(fit))
    } else {
      out$df <- rep(stats::df.residual(fit), nrow(co)); out$p <- unname(co[, 4])
      out$sigma2 <- summary(fit)$sigma^2
      out$re_group <- character(); out$re_name <- character(); out$re_var <- numeric()
      out$ngrps <- numeric(); out$ngrps_names <- character(); out$conv <- character()
      out$singular <- FALSE
    }
    out
  }, acc)
  out$warnings <- unique(acc$warns)
  out$seconds <- proc.time()[["elapsed"]] - started
  out
}
