// Summarise arrives in the next step (PDF and long documents through pdfjs-dist, summarised in
// chunks). It will use the same engine client as the writer: services().engine.generate() for
// its own runs, and onGenerationEvent/onMetrics to show progress.
export function SummariseView() {
  return (
    <section className="view" aria-label="Summarise">
      <h1>Summarise</h1>
      <p className="placeholder">Summarising long documents and PDFs arrives in the next step. The Writer works today.</p>
    </section>
  );
}
