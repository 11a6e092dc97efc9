"""Exporters: where scored traces go (OTLP gRPC, OTLP HTTP, OTLP/JSON file, debug)."""

from exporters.base import Exporter, ExporterConfig, ExportError
from exporters.debug import DebugExporter
from exporters.file import FileExporter
from exporters.otlp_grpc import OtlpGrpcExporter
from exporters.otlp_http import OtlpHttpExporter

__all__ = [
    "DebugExporter", "Exporter", "ExporterConfig", "ExportError", "FileExporter", "OtlpGrpcExporter", "OtlpHttpExporter",
]
