"""What the Worker tells about itself: task traces (trace_*), OpenTelemetry span
export (otel_*: the Worker's side and the exporter process), and the Prometheus
metrics with the histograms and bounded labels they use. Nothing is re-exported
here."""
