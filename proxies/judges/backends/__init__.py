"""Judge backends: turn prompts into `Completion`s (no Django here).

Two backends speak one interface (`base.JudgeBackend`), one module each, and `registry`
builds either from a plain (JSON-storable) config:

- `OpenAICompatibleBackend`: any server speaking the OpenAI wire format (vLLM, llama.cpp server,
  Ollama, hosted APIs), in chat (`POST {base_url}/chat/completions`) or completions
  (`POST {base_url}/completions`) mode. Concurrent requests (a thread pool bounded by
  `concurrency`), retries with exponential backoff and jitter on 429, 5xx, connection errors and
  timeouts (honouring `Retry-After`), a response cache, token and latency accounting.
- `LocalHFBackend`: a local Hugging Face model directory (causal or seq2seq), loaded lazily once
  per process and device; next-token logits for option scoring, greedy generation.

Option scoring (`score_options`) is LATTE's inference: the probability of each answer option as
the next token, normalised over the options asked for, so for ["yes", "no"] it is
P(yes) = softmax over the yes/no log-probabilities. Tokens count for an option whatever their
case and surrounding spaces ("yes", " Yes", "YES" all count for "yes"): their probabilities are
summed. When a server returns no log-probabilities the answer text is parsed instead and the
`Completion` says so (`source="parsed"`, a one-hot `option_probs`).

Results come back in prompt order. A failed prompt gives a `Completion` with `source="error"` and
the reason in `error`; it never fails the rest of the batch.

Where requests may go: `OpenAICompatibleBackend(..., policy=NetworkPolicy(...))` checks every
connection against the policy (`proxies.judges.network`), follows no redirect, ignores proxy
environment variables and keeps failing endpoints' response bodies out of error messages. Without
a policy (a library user talking to a server of their own) none of that applies; an application
that lets others choose `base_url` must pass one.
"""
