"""Parses a Prometheus text exposition from stdin with prometheus-client's own parser and prints
every sample as JSON: [{"family", "type", "name", "labels", "value"}]. A malformed exposition
makes the parser raise: a non-zero exit the test reports."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        samples.append(
            {
                "family": family.name,
                "type": family.type,
                "name": s.name,
                "labels": s.labels,
                "value": s.value,
            }
        )
json.dump(samples, sys.stdout)
