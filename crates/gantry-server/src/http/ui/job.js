// The job page's live log (ui/job.rs): the tail of the log first, then every half second what
// the runner sent since, while the job runs. Lines arrive rendered (escaped HTML from
// ui/log.rs); sections become collapsible blocks with their durations. The view follows
// the end of the log unless the reader scrolled up.
(function () {
  'use strict';
  var box = document.getElementById('log');
  if (!box) { return; }
  var url = box.getAttribute('data-trace');
  var badge = document.getElementById('status');
  var EARLIER = 1024 * 1024;
  var at = { offset: null, line: null, state: '' };
  var root, stack, last;

  function reset() {
    box.textContent = '';
    root = document.createElement('div');
    box.appendChild(root);
    stack = [];
    last = null;
  }

  function here() { return stack.length ? stack[stack.length - 1].body : root; }

  function atEnd() {
    var doc = document.documentElement;
    return window.innerHeight + window.scrollY >= doc.scrollHeight - 40;
  }

  function two(n) { return (n < 10 ? '0' : '') + n; }

  function lineOf(l, html) {
    var d = document.createElement('div');
    d.className = 'line';
    var n = document.createElement('span');
    n.className = 'n';
    n.textContent = l.n;
    d.appendChild(n);
    if (l.t) {
      var t = document.createElement('span');
      t.className = 't';
      t.textContent = l.t;
      d.appendChild(t);
    }
    var c = document.createElement('span');
    c.className = 'c';
    c.innerHTML = html;
    d.appendChild(c);
    return d;
  }

  function open(m, l, withText) {
    var sec = document.createElement('div');
    sec.className = 'sec' + (m.c ? ' collapsed' : '');
    sec.setAttribute('data-section', m.name);
    var head = lineOf(l, withText ? l.h : '');
    if (!withText) { head.querySelector('.c').textContent = m.name; }
    head.className += ' hdr';
    head.setAttribute('role', 'button');
    head.setAttribute('aria-expanded', m.c ? 'false' : 'true');
    head.tabIndex = 0;
    var dur = document.createElement('span');
    dur.className = 'dur';
    head.appendChild(dur);
    var toggle = function () {
      var closed = sec.classList.toggle('collapsed');
      head.setAttribute('aria-expanded', closed ? 'false' : 'true');
    };
    head.addEventListener('click', toggle);
    head.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(); }
    });
    var body = document.createElement('div');
    body.className = 'body';
    sec.appendChild(head);
    sec.appendChild(body);
    here().appendChild(sec);
    stack.push({ name: m.name, ts: m.ts, body: body, dur: dur });
  }

  function close(m) {
    for (var i = stack.length - 1; i >= 0; i--) {
      if (stack[i].name === m.name) {
        var s = Math.max(0, m.ts - stack[i].ts);
        stack[i].dur.textContent = two(Math.floor(s / 60)) + ':' + two(s % 60);
        stack.length = i;
        return;
      }
    }
  }

  function add(lines) {
    lines.forEach(function (l) {
      var marks = l.m || [];
      var lastStart = -1;
      marks.forEach(function (m, i) { if (m.s === 'start') { lastStart = i; } });
      marks.forEach(function (m, i) {
        if (m.s === 'end') { close(m); } else { open(m, l, i === lastStart && l.v); }
      });
      if (lastStart >= 0) { last = null; return; }
      if (!l.v) { return; }
      if (l.k && last) {
        var more = document.createElement('span');
        more.innerHTML = l.h;
        last.querySelector('.c').appendChild(more);
        return;
      }
      last = lineOf(l, l.h);
      here().appendChild(last);
    });
  }

  function earlier(start) {
    if (start <= 0) { return; }
    var b = document.createElement('button');
    b.type = 'button';
    b.className = 'earlier';
    b.textContent = 'Show earlier output (' + Math.ceil(start / 1024) + ' KiB before)';
    b.addEventListener('click', function () {
      reset();
      at = { offset: Math.max(0, start - EARLIER), line: null, state: '' };
      poll(false);
    });
    box.insertBefore(b, root);
  }

  function status(s) {
    if (badge && badge.firstChild && badge.firstChild.textContent !== s) {
      badge.firstChild.textContent = s;
      badge.firstChild.className = 's ' + s;
    }
  }

  function poll(first) {
    var q = '';
    if (at.offset !== null) {
      q = '?offset=' + at.offset + (at.line === null ? '' : '&line=' + at.line) +
        '&state=' + encodeURIComponent(at.state);
    }
    fetch(url + q, { credentials: 'same-origin', headers: { Accept: 'application/json' } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (d) {
        var follow = first || atEnd();
        if (at.line === null) { earlier(d.start); }
        add(d.lines);
        at = { offset: d.offset, line: d.line, state: d.state };
        status(d.status);
        box.setAttribute('data-offset', d.offset);
        box.setAttribute('data-complete', d.complete ? '1' : '0');
        if (follow) { window.scrollTo(0, document.documentElement.scrollHeight); }
        if (d.offset < d.size && d.lines.length) { setTimeout(poll, 0, false); }
        else if (!d.complete) { setTimeout(poll, 500, false); }
      })
      .catch(function () { setTimeout(poll, 5000, false); });
  }

  reset();
  poll(true);
}());
