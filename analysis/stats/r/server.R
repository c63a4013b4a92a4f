# evalstudy's R worker: a separate process that Python (analysis/stats/rbridge.py) talks to over
# pipes. R and its packages are GPL; evalstudy is Apache-2.0 and never loads R into its own
# process, it runs this script with
#   Rscript --vanilla server.R <dir of this file> <the worker's private temporary directory>
#
# Protocol (the Python side's module docstring is the reference):
# * start-up: one reply line with id 0 (R and package versions, or why the worker is unusable);
# * then, per line read from stdin, one JSON request
#     {"id": 7, "fn": "evalstudy_glmer", "args": [...], "kwargs": {...}}
#   ("code": "function(...) ..." instead of "fn" for tests and benchmarks), and one JSON reply
#   written to stdout
#     {"id": 7, "ok": true, "value": ..., "warnings": [...], "messages": [...],
#      "output": "...", "elapsed": 0.12}
#   or with "ok": false and "error": {"message", "call", "class"};
# * EOF on stdin ends the worker.
# Everything R prints while a request runs (print(), cat(), message(), warnings) is captured and
# returned as data; stdout carries nothing but replies, stderr goes to a log file.

local({
  args <- commandArgs(trailingOnly = TRUE)
  r_dir <- if (length(args)) args[[1]] else "."
  stdout_con <- stdout()

  # Every reply starts with a newline: stray C-level output that bypassed R's connections
  # (printf in compiled code) then never shares a line with a reply.
  send <- function(json) {
    writeLines(c("", json), stdout_con, useBytes = TRUE)
    flush(stdout_con)
  }

  if (!requireNamespace("jsonlite", quietly = TRUE)) {
    # Without jsonlite no reply can be encoded: a fixed line says why.
    send(paste0('{"id":0,"ok":false,"error":{"message":"the R package jsonlite is not ',
                'installed (Debian: apt-get install r-cran-jsonlite)","call":null,',
                '"class":["startup"]},"warnings":[],"messages":[],"output":"","elapsed":0.0}'))
    quit(save = "no", status = 3)
  }

  # --- encoding: R value -> JSON text ---------------------------------------------------------
  # Rules: atomic vectors are always arrays (R has no scalars; names of atomic vectors are
  # dropped); doubles are printed with 17 significant digits (exact round trip) and always
  # carry a decimal point or exponent, NA/NaN -> NaN, +-Inf -> Infinity/-Infinity (tokens
  # Python's json module reads); integer/logical/character NA -> null; factors -> their labels;
  # a matrix -> an array of its rows; a data.frame -> an object of columns; a list with names ->
  # an object, without -> an array; NULL -> null. Anything else is an error.
  enc_chr <- function(x) as.character(jsonlite::toJSON(enc2utf8(as.character(x)), na = "null"))

  enc_atomic <- function(x) {
    if (is.factor(x)) return(enc_chr(as.character(x)))
    if (is.character(x)) return(enc_chr(x))
    s <- if (is.double(x)) {
      s <- sprintf("%.17g", x)
      plain <- !grepl("[.eEnN]", s)
      s[plain] <- paste0(s[plain], ".0")
      s[is.na(x)] <- "NaN"
      s[!is.na(x) & x == Inf] <- "Infinity"
      s[!is.na(x) & x == -Inf] <- "-Infinity"
      s
    } else if (is.integer(x)) {
      s <- as.character(x)
      s[is.na(x)] <- "null"
      s
    } else if (is.logical(x)) {
      s <- ifelse(x, "true", "false")
      s[is.na(x)] <- "null"
      s
    } else {
      stop("cannot encode an atomic vector of type ", typeof(x), " as JSON")
    }
    paste0("[", paste(s, collapse = ","), "]")
  }

  json_str <- function(x) {  # one string -> a JSON string literal
    s <- enc_chr(x)
    substring(s, 2L, nchar(s) - 1L)
  }

  enc_object <- function(keys, values) {
    paste0("{", paste0(vapply(keys, json_str, ""), ":", values, collapse = ","), "}")
  }

  enc <- function(x) {
    if (is.null(x)) return("null")
    if (is.data.frame(x)) {
      if (!length(x)) return("{}")
      return(enc_object(names(x), vapply(x, enc, "")))
    }
    if (is.list(x) && !is.object(x)) {
      if (!length(x)) return(if (is.null(names(x))) "[]" else "{}")
      values <- vapply(x, enc, "")
      nm <- names(x)
      if (!is.null(nm) && all(nzchar(nm)) && !anyDuplicated(nm)) return(enc_object(nm, values))
      return(paste0("[", paste(values, collapse = ","), "]"))
    }
    if (is.matrix(x) && is.atomic(x)) {
      rows <- vapply(seq_len(nrow(x)), function(i) enc_atomic(x[i, , drop = TRUE]), "")
      return(paste0("[", paste(rows, collapse = ","), "]"))
    }
    if (is.atomic(x) && (is.null(attr(x, "class")) || is.factor(x))) return(enc_atomic(x))
    stop("cannot encode an object of class ", paste(class(x), collapse = "/"),
         " as JSON: return plain vectors, lists, matrices or data frames")
  }

  # --- decoding: JSON request -> R values -----------------------------------------------------
  # jsonlite parses numbers exactly; its own simplification would coerce mixed arrays (["a",
  # true] -> c("a", "TRUE")), so arrays are simplified here: an array of scalars of one kind
  # (numbers, strings or booleans, null allowed as NA) becomes an atomic vector, anything else a
  # list; an object becomes a named list; {"__frame__": {...}} becomes a data.frame.
  decode <- function(x) {
    if (is.null(x)) return(NULL)
    if (!is.list(x)) return(x)
    nm <- names(x)
    if (!is.null(nm)) {
      if (identical(nm, "__frame__")) return(read_frame(x[["__frame__"]]))
      return(lapply(x, decode))
    }
    if (!length(x)) return(list())
    scalar <- vapply(x, function(e) is.null(e) || (is.atomic(e) && length(e) == 1L), TRUE)
    if (all(scalar)) {
      kinds <- unique(vapply(x, function(e) if (is.null(e)) "null" else if (is.numeric(e))
        "number" else typeof(e), ""))
      kinds <- setdiff(kinds, "null")
      if (length(kinds) <= 1L) {
        na <- switch(if (length(kinds)) kinds else "logical", number = NA_real_,
                     character = NA_character_, logical = NA)
        return(unlist(lapply(x, function(e) if (is.null(e)) na else e)))
      }
    }
    lapply(x, decode)
  }

  # A data frame travels as a binary file (written by Python in a private directory) plus its
  # description in the request: columns in order, each one block of `nrow` little-endian
  # values, one after the other: "factor" (1-based 32-bit integer codes; "levels" and
  # "ordered" in the request, so the level order is exactly Python's), "integer" (32-bit),
  # "logical" (32-bit, as R stores them) or "double" (IEEE 754 64-bit, so every double
  # arrives bit for bit). Missing values are written as R's own NA bit patterns (INT_MIN;
  # the NaN with payload 1954), which readBin() returns as NA. No text is parsed: CSV cost
  # about 20 ms per 50,000 rows here, and its decimal reader is not correctly rounded.
  read_frame <- function(spec) {
    cols <- spec$columns
    n <- as.integer(spec$nrow)
    if (!length(cols)) return(structure(list(), class = "data.frame", row.names = seq_len(n)))
    types <- vapply(cols, function(c) c$type, "")
    known <- c("factor", "double", "integer", "logical")
    if (!all(types %in% known)) {
      stop("unknown column type in frame: ", paste(types, collapse = ", "))
    }
    con <- file(spec$path, open = "rb")
    on.exit(close(con))
    out <- lapply(seq_along(cols), function(j) {
      col <- cols[[j]]
      v <- if (col$type == "double") {
        readBin(con, what = "double", n = n, size = 8L, endian = "little")
      } else {
        readBin(con, what = "integer", n = n, size = 4L, endian = "little")
      }
      if (length(v) != n) {
        stop(sprintf("frame %s: column %s has %d values, expected %d", spec$path, col$name,
                     length(v), n))
      }
      if (col$type == "logical") return(as.logical(v))
      if (col$type != "factor") return(v)
      lev <- as.character(unlist(col$levels))
      if (any(v < 1L | v > length(lev), na.rm = TRUE)) {
        stop("frame column ", col$name, ": factor code outside its levels")
      }
      structure(v, levels = lev,
                class = if (isTRUE(col$ordered)) c("ordered", "factor") else "factor")
    })
    if (length(readBin(con, what = "raw", n = 1L))) {
      stop(sprintf("frame %s: more data than %d x %d", spec$path, n, length(cols)))
    }
    names(out) <- vapply(cols, function(c) c$name, "")
    structure(out, class = "data.frame", row.names = .set_row_names(n))
  }

  # --- the functions Python may call -----------------------------------------------------------
  # Every *.R file next to this one except this one defines functions in `lib`; a request names
  # one of them. "code" requests (tests, benchmarks: never user text) are evaluated once in a
  # child of `lib` and cached by their text.
  suppressWarnings(suppressPackageStartupMessages({
    loaded <- vapply(c("ordinal", "lme4"), function(p)
      requireNamespace(p, quietly = TRUE), logical(1))
    # Attached as before (emmeans and users' R code find clmm/glmer methods on the search path).
    for (p in names(loaded)[loaded]) library(p, character.only = TRUE)
  }))
  lib <- new.env(parent = globalenv())
  for (f in sort(list.files(r_dir, pattern = "[.]R$", full.names = TRUE))) {
    if (basename(f) != "server.R") sys.source(f, envir = lib, keep.source = FALSE)
  }
  code_cache <- new.env(parent = emptyenv())

  resolve <- function(req) {
    if (!is.null(req$fn)) {
      name <- req$fn
      if (!is.character(name) || length(name) != 1L ||
          !grepl("^[A-Za-z][A-Za-z0-9._]*$", name)) stop("bad function name")
      fn <- get0(name, envir = lib, inherits = FALSE)
      if (!is.function(fn)) {
        stop("no R function named ", name, " in analysis/stats/r/")
      }
      return(fn)
    }
    code <- req$code
    if (!is.character(code) || length(code) != 1L) stop("a request needs fn or code")
    fn <- code_cache[[code]]
    if (is.null(fn)) {
      exprs <- parse(text = code, keep.source = FALSE)
      # Only a function definition is evaluated: building a closure runs nothing.
      if (length(exprs) != 1L || !is.call(exprs[[1L]]) ||
          !identical(exprs[[1L]][[1L]], as.name("function"))) {
        stop("code must be one function definition: function(...) ...")
      }
      fn <- eval(exprs[[1L]], new.env(parent = lib))
      assign(code, fn, envir = code_cache)
    }
    fn
  }

  versions <- function() {
    pkgs <- c("ordinal", "lme4", "lmerTest", "emmeans", "jsonlite")
    # The DESCRIPTION field (2022.11-16), not packageVersion() (2022.11.16): it is what R users
    # read in sessionInfo() and citations.
    v <- lapply(pkgs, function(p) tryCatch(utils::packageDescription(p)$Version,
                                           error = function(e) NULL,
                                           warning = function(w) NULL))
    names(v) <- pkgs
    list(R = paste(R.version$major, R.version$minor, sep = "."), pid = Sys.getpid(),
         packages = v, loaded = as.list(loaded))
  }

  reply <- function(id, ok, value = NULL, error = NULL, warnings = character(),
                    messages = character(), output = "", elapsed = 0) {
    parts <- c(
      id = sprintf("%d", as.integer(id)), ok = if (ok) "true" else "false",
      value = if (ok) value else "null",
      error = if (is.null(error)) "null" else enc(error),
      warnings = enc_chr(warnings), messages = enc_chr(messages),
      output = json_str(output), elapsed = sprintf("%.6f", elapsed)
    )
    enc_object(names(parts), unname(parts))
  }

  condition_info <- function(e) {
    call <- conditionCall(e)
    # A do.call() call embeds its arguments (whole data frames): keep the head of the call only.
    call_text <- if (is.null(call)) NULL else
      substr(paste(deparse(call, nlines = 1L, width.cutoff = 200L), collapse = " "), 1L, 200L)
    list(message = conditionMessage(e), call = call_text, class = class(e))
  }

  # Runs one request with R's output, messages and warnings captured; the sinks are undone on
  # the way out whatever happens (also any sink the called function left open), so that the
  # reply goes to the real stdout.
  run <- function(req) {
    state <- list(warnings = character(), messages = character())
    output <- character()
    capture <- textConnection("output", "w", local = TRUE)
    sinks <- sink.number()
    sink(capture)
    sink(capture, type = "message")
    restored <- FALSE
    restore <- function() {
      if (restored) return(invisible())
      restored <<- TRUE
      sink(type = "message")
      while (sink.number() > sinks) sink()
      close(capture)  # flushes an unfinished last line into `output`
    }
    on.exit(restore())
    result <- tryCatch(
      withCallingHandlers({
        fn <- resolve(req)
        call_args <- c(lapply(req$args, decode), lapply(req$kwargs, decode))
        list(ok = TRUE, value = enc(do.call(fn, call_args)))
      },
      warning = function(w) {
        state$warnings <<- c(state$warnings, conditionMessage(w))
        invokeRestart("muffleWarning")
      },
      message = function(m) {
        state$messages <<- c(state$messages, sub("\n$", "", conditionMessage(m)))
        invokeRestart("muffleMessage")
      }),
      error = function(e) list(ok = FALSE, error = condition_info(e)))
    restore()
    c(result, state, list(output = paste(output, collapse = "\n")))
  }

  handle <- function(line) {
    started <- proc.time()[["elapsed"]]
    req <- tryCatch(jsonlite::fromJSON(line, simplifyVector = FALSE), error = function(e) e)
    if (inherits(req, "error")) {
      return(reply(-1L, FALSE, error = list(message = paste("bad request:",
                                                            conditionMessage(req)),
                                            call = NULL, class = "protocol")))
    }
    id <- if (is.numeric(req$id) && length(req$id) == 1L) req$id else -1L
    r <- run(req)
    reply(id, r$ok, r$value, r$error, r$warnings, r$messages, r$output,
          proc.time()[["elapsed"]] - started)
  }

  send(reply(0L, TRUE, enc(versions())))
  input <- file("stdin", open = "r", encoding = "UTF-8")
  repeat {
    line <- readLines(input, n = 1L, warn = FALSE, encoding = "UTF-8")
    if (!length(line)) {
      # EOF: the Python process closed the pipe or went away (perhaps without cleaning up, e.g.
      # a Celery child ended with os._exit): remove its private directory, then end.
      if (length(args) >= 2L && startsWith(basename(args[[2L]]), "evalstudy-r-")) {
        unlink(args[[2L]], recursive = TRUE)
      }
      break
    }
    if (!nzchar(line)) next
    send(tryCatch(handle(line), error = function(e) {
      # Only reached if building the reply itself failed (e.g. an unencodable error object).
      reply(-1L, FALSE, error = list(message = paste("worker error:", conditionMessage(e)),
                                     call = NULL, class = "protocol"))
    }))
  }
})
