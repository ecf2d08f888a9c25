// A uPlot chart (the maintained charting library the inspector's line and area charts use; the
// token map stays a plain canvas). Made once per options key, fed new data in place. Where the
// page has no 2-D canvas (component tests on happy-dom) nothing is drawn: the views' numbers are
// in their tables and aria labels either way.
import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

let canvasWorks: boolean | undefined;
function haveCanvas(): boolean {
  if (canvasWorks === undefined) {
    try {
      canvasWorks = document.createElement('canvas').getContext('2d') !== null;
    } catch {
      canvasWorks = false;
    }
  }
  return canvasWorks;
}

export function UChart({ options, data, label, optionsKey }: { options: Omit<uPlot.Options, 'width'>; data: uPlot.AlignedData; label: string; optionsKey: string }) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);

  useEffect(() => {
    const el = host.current;
    if (!el || !haveCanvas()) return;
    const width = Math.max(320, el.clientWidth || 800);
    const u = new uPlot({ ...options, width }, data, el);
    chart.current = u;
    const resize = new ResizeObserver(() => u.setSize({ width: Math.max(320, el.clientWidth || width), height: options.height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      u.destroy();
      chart.current = null;
    };
    // the chart is rebuilt only when its series change (optionsKey); data goes in below
  }, [optionsKey]);

  useEffect(() => {
    chart.current?.setData(data);
  }, [data]);

  return <div ref={host} className="uchart" role="img" aria-label={label} />;
}
