// Media stimuli on the rating page (templates/annotation/_media.html): keyboard control of each
// player and its reports to the listening log. Keys (no modifier, focus not in a text box):
//   p  play / pause        r  replay from the start
//   j  back 2 seconds      s  slower (0.75x) / normal speed (1x)
// They act on the player holding the focus, else on the first one; none of them is a rating
// shortcut (rate.js: digits, y/n, a/b/t and g/x for both good/both bad, Enter; answers.js: m in an error-span pane).
//
// The player reports its running totals (plays, seeks) and the stretches it played; the server
// merges them into the slot's log (annotation.media), refuses a play over the study's limit and
// decides when the file was heard to the end. With "hear it to the end first", submitting stays
// blocked here until the server says so, and the server refuses an early answer anyway.
(function () {
  "use strict";
  const REPORT_EVERY_MS = 5000;
  const RETRY_MS = 2000;
  const MAX_RETRIES = 90;
  const NEW_PLAY_BEFORE_S = 0.25;  // playback starting this close to the start is a new play
  const players = new Map();  // section -> Player

  function csrfToken() {
    const input = document.querySelector('#rate-form input[name="csrfmiddlewaretoken"]');
    return input ? input.value : "";
  }

  function box() {
    return document.getElementById("media-stimuli");
  }

  class Player {
    constructor(section, container) {
      this.section = section;
      this.box = container;
      this.media = section.querySelector(".media-element");
      this.progress = section.querySelector(".media-progress");
      this.status = section.querySelector(".media-status");
      this.toggleButton = section.querySelector('[data-action="toggle"]');
      this.speedButton = section.querySelector('[data-action="speed"]');
      this.logUrl = section.dataset.logUrl;
      this.plays = Number(section.dataset.plays) || 0;
      this.seeks = Number(section.dataset.seeks) || 0;
      this.completed = section.dataset.completed === "true";
      this.maxPlays = container.dataset.maxPlays ? Number(container.dataset.maxPlays) : null;
      this.intervals = [];  // [start, end] stretches played on this page
      this.from = null;  // where the stretch now playing began
      this.last = 0;  // the position at the last timeupdate
      this.endedHere = false;
      this.retries = 0;
      this.replaying = false;  // the seek back to 0 of a replay is not a rater's seek
      this.restart = false;  // the next playback is a new play
      this.timer = null;
      this.wire();
      section.querySelector(".media-controls").hidden = false;
      this.progress.hidden = false;
      this.refresh();
    }

    get exhausted() {
      return this.maxPlays !== null && this.plays >= this.maxPlays;
    }

    say(text) {
      this.status.textContent = text;
    }

    wire() {
      const m = this.media;
      m.addEventListener("play", () => this.onPlay());
      m.addEventListener("pause", () => { this.close(m.currentTime); this.report(); this.refresh(); });
      m.addEventListener("ended", () => {
        this.close(m.duration || m.currentTime);
        this.endedHere = true;
        this.say(this.box.dataset.msgEnded);
        this.report();
        this.refresh();
      });
      m.addEventListener("timeupdate", () => {
        if (!m.seeking) this.last = m.currentTime;
        this.progress.value = m.currentTime;
      });
      m.addEventListener("seeking", () => {
        // The stretch before the jump was heard; what is skipped was not.
        this.close(this.last);
        if (!this.replaying) this.seeks += 1;
      });
      m.addEventListener("seeked", () => {
        this.replaying = false;
        this.last = m.currentTime;
        if (!m.paused) this.from = m.currentTime;
      });
      m.addEventListener("ratechange", () => {
        // The log counts what was heard against the time that passed: never faster than 1x.
        if (m.playbackRate > 1) m.playbackRate = 1;
        const slow = m.playbackRate < 1;
        this.speedButton.setAttribute("aria-pressed", String(slow));
        this.speedButton.querySelector("[data-label]").textContent =
          slow ? this.box.dataset.labelNormal : this.box.dataset.labelSlower;
      });
      m.addEventListener("loadedmetadata", () => {
        if (Number.isFinite(m.duration)) this.progress.max = m.duration;
      });
      for (const button of this.section.querySelectorAll("[data-action]")) {
        button.addEventListener("click", () => this.act(button.dataset.action));
      }
    }

    onPlay() {
      const m = this.media;
      const fresh = this.restart || this.endedHere || m.currentTime < NEW_PLAY_BEFORE_S;
      this.restart = false;
      if (fresh) {
        if (this.exhausted) {
          m.pause();
          this.say(this.box.dataset.msgNoPlays);
          return;
        }
        this.plays += 1;
        this.endedHere = false;
      }
      this.from = m.currentTime;
      this.last = m.currentTime;
      this.report();  // the first report of a play starts the server's clock
      clearInterval(this.timer);
      this.timer = setInterval(() => { if (!m.paused) this.report(); }, REPORT_EVERY_MS);
      this.refresh();
    }

    close(at) {
      if (this.from !== null && at > this.from) this.intervals.push([this.from, at]);
      this.from = null;
      if (this.media.paused) clearInterval(this.timer);
    }

    snapshot() {
      const open = this.from !== null && !this.media.paused
        ? [[this.from, this.media.currentTime]] : [];
      const merged = [];
      for (const [start, end] of this.intervals.concat(open).sort((x, y) => x[0] - y[0])) {
        const previous = merged[merged.length - 1];
        if (previous && start <= previous[1] + 0.05) previous[1] = Math.max(previous[1], end);
        else merged.push([start, end]);
      }
      return merged.slice(-200).map(([s, e]) => [Math.round(s * 1000) / 1000,
                                                   Math.round(e * 1000) / 1000]);
    }

    body() {
      return new URLSearchParams({
        plays: String(this.plays), seeks: String(this.seeks),
        intervals: JSON.stringify(this.snapshot()),
      });
    }

    report() {
      if (!this.logUrl) return;
      fetch(this.logUrl, {
        method: "POST", body: this.body(), credentials: "same-origin", keepalive: true,
        headers: { "X-CSRFToken": csrfToken() },
      }).then((response) => response.json().then((data) => this.answer(response.status, data)))
        .catch(() => this.retryLater());
    }

    answer(status, data) {
      if (data.completed) this.completed = true;
      if (typeof data.plays === "number" && data.plays > this.plays) this.plays = data.plays;
      if (status === 409 && this.exhausted && this.media.paused) {
        this.say(data.message || this.box.dataset.msgNoPlays);
      } else if (!this.completed && this.endedHere) {
        this.retryLater();  // heard to the end here: the server agrees once time has passed
      }
      this.refresh();
    }

    retryLater() {
      if (this.retries >= MAX_RETRIES) return;
      this.retries += 1;
      setTimeout(() => this.report(), RETRY_MS);
    }

    beacon() {
      // The page is going away: send what is not reported yet, without waiting.
      if (!this.logUrl || !navigator.sendBeacon) return;
      const form = new FormData();
      for (const [key, value] of this.body()) form.append(key, value);
      form.append("csrfmiddlewaretoken", csrfToken());
      navigator.sendBeacon(this.logUrl, form);
    }

    act(action) {
      const m = this.media;
      if (action === "toggle") {
        if (m.paused) this.start();
        else m.pause();
      } else if (action === "replay") {
        if (this.exhausted) { this.say(this.box.dataset.msgNoPlays); return; }
        this.close(m.currentTime);
        this.replaying = true;
        this.restart = true;
        m.currentTime = 0;
        if (m.paused) this.start();
        else this.onPlay();
      } else if (action === "back") {
        m.currentTime = Math.max(0, m.currentTime - 2);
      } else if (action === "speed") {
        m.playbackRate = m.playbackRate < 1 ? 1 : 0.75;
      }
    }

    start() {
      const promise = this.media.play();
      if (promise) promise.catch(() => this.say(this.box.dataset.msgBlocked));
    }

    refresh() {
      const playing = !this.media.paused;
      this.toggleButton.querySelector("[data-label]").textContent =
        playing ? this.box.dataset.labelPause : this.box.dataset.labelPlay;
      const noPlays = this.exhausted && !playing && (this.endedHere || this.media.currentTime < NEW_PLAY_BEFORE_S);
      this.toggleButton.disabled = noPlays;
      this.section.querySelector('[data-action="replay"]').disabled = this.exhausted;
      if (noPlays) this.say(this.box.dataset.msgNoPlays);
      else if (this.maxPlays !== null && !playing && !this.endedHere) {
        this.say(`${this.box.dataset.msgPlaysLeft} ${this.maxPlays - this.plays}`);
      }
      gate();
    }
  }

  // "Hear it to the end first": the form's submit waits for every player of the item.
  function gate() {
    const container = box();
    const form = document.getElementById("rate-form");
    if (!container || !form || container.dataset.mustFinish !== "true") return;
    const waiting = Array.from(players.values()).some((p) => !p.completed);
    form.dataset.mediaPending = waiting ? "true" : "";
    const button = form.querySelector('button[type="submit"]');
    if (button) {
      button.disabled = waiting;
      button.title = waiting ? container.dataset.msgFinishFirst : "";
    }
  }

  window.addEventListener("submit", (event) => {
    const form = event.target;
    if (form instanceof HTMLFormElement && form.id === "rate-form" && form.dataset.mediaPending === "true") {
      event.preventDefault();
      event.stopImmediatePropagation();
      const first = Array.from(players.values()).find((p) => !p.completed);
      if (first) {
        first.say(box().dataset.msgFinishFirst);
        first.toggleButton.focus();
      }
    }
  }, true);

  function setUp(root) {
    for (const [section, player] of players) {
      if (!section.isConnected) { clearInterval(player.timer); players.delete(section); }
    }
    const container = box();
    if (!container) return;
    container.querySelector(".media-keys").hidden = false;
    for (const section of (root || document).querySelectorAll("[data-player]")) {
      if (!players.has(section)) players.set(section, new Player(section, container));
    }
    gate();
    if (container.dataset.autoplay === "true") {
      const first = players.values().next().value;
      if (first && !first.exhausted && first.plays === 0) first.start();
    }
  }

  function current() {
    const focused = document.activeElement;
    for (const [section, player] of players) {
      if (focused instanceof Element && section.contains(focused)) return player;
    }
    return players.values().next().value || null;
  }

  const KEYS = { p: "toggle", r: "replay", j: "back", s: "speed" };

  window.addEventListener("keydown", (event) => {
    if (!players.size || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target instanceof Element) {
      // A player's own button takes Enter and Space itself (not the form's Enter: rate.js).
      if ((event.key === "Enter" || event.key === " ") && target.closest(".media-player")) {
        event.stopPropagation();
        return;
      }
      if (target.closest("textarea, select, [contenteditable], [data-span-pane]")) return;
      if (target instanceof HTMLInputElement && !["radio", "checkbox"].includes(target.type)) return;
    }
    const action = KEYS[event.key.toLowerCase()];
    const player = action && current();
    if (!player) return;
    event.preventDefault();
    player.act(action);
  }, true);

  // Before the form leaves with htmx (the next item replaces this one) and when the page
  // goes away, the players' last stretches are reported.
  document.addEventListener("htmx:beforeRequest", () => { for (const p of players.values()) p.report(); });
  window.addEventListener("pagehide", () => { for (const p of players.values()) p.beacon(); });
  document.addEventListener("htmx:load", (event) => setUp(event.detail && event.detail.elt));
  setUp(document);
})();
