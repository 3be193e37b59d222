// The pipeline page's graph (ui/pipelines.rs): draws each `needs` edge as a curve from
// the needed job to the job that needs it, in an SVG laid over the columns; redrawn when
// the window changes size.
(function () {
  'use strict';
  var graph = document.querySelector('.graph');
  if (!graph) { return; }
  var NS = 'http://www.w3.org/2000/svg';

  function draw() {
    var old = graph.querySelector('svg.edges');
    if (old) { old.remove(); }
    var svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('class', 'edges');
    svg.setAttribute('aria-hidden', 'true');
    var box = graph.getBoundingClientRect();
    svg.setAttribute('width', box.width);
    svg.setAttribute('height', box.height);
    var byName = {};
    graph.querySelectorAll('.job').forEach(function (j) { byName[j.getAttribute('data-name')] = j; });
    graph.querySelectorAll('.job').forEach(function (job) {
      var needs = job.getAttribute('data-needs');
      if (!needs) { return; }
      JSON.parse(needs).forEach(function (name) {
        var from = byName[name];
        if (!from) { return; }
        var a = from.getBoundingClientRect();
        var b = job.getBoundingClientRect();
        var x1 = a.right - box.left, y1 = a.top + a.height / 2 - box.top;
        var x2 = b.left - box.left, y2 = b.top + b.height / 2 - box.top;
        var bend = Math.max(20, (x2 - x1) / 2);
        var path = document.createElementNS(NS, 'path');
        path.setAttribute('d', 'M' + x1 + ',' + y1 + ' C' + (x1 + bend) + ',' + y1 + ' ' +
          (x2 - bend) + ',' + y2 + ' ' + x2 + ',' + y2);
        path.setAttribute('data-from', name);
        path.setAttribute('data-to', job.getAttribute('data-name'));
        svg.appendChild(path);
      });
    });
    graph.insertBefore(svg, graph.firstChild);
  }

  draw();
  window.addEventListener('resize', draw);
}());
