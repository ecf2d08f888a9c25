// The cache inspector arrives in the next step: it will subscribe to every generation through
// services().engine.onGenerationEvent() and onMetrics() (throttled to 10/s) and, once the
// protocol carries them, to the per-layer KV metrics of ARCHITECTURE.md §7.
export function InspectorView() {
  return (
    <section className="view" aria-label="Inspector">
      <h1>Cache inspector</h1>
      <p className="placeholder">The live view of the KV cache (fetched tokens, hit rate, memory per layer) arrives in the next step.</p>
    </section>
  );
}
