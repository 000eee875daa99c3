"""Validates events (NDJSON on stdin, one JSON value a line) against a schema of an OpenAPI
document's components: `check_events.py <openapi.json> <SchemaName>`. Prints one line per event
that fails, with the reason, and exits 1 if any does; else prints `ok N` and exits 0.

The document's components are JSON Schema 2020-12 (OpenAPI 3.1), resolved in place."""

import json
import sys

from jsonschema import Draft202012Validator


def main() -> int:
    doc_path, name = sys.argv[1], sys.argv[2]
    with open(doc_path, encoding="utf-8") as f:
        doc = json.load(f)
    if name not in doc.get("components", {}).get("schemas", {}):
        print(f"no schema {name} in {doc_path}")
        return 2
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    validator = Draft202012Validator(root)
    failed = 0
    count = 0
    for i, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        count += 1
        event = json.loads(line)
        errors = list(validator.iter_errors(event))
        if errors:
            failed += 1
            # With oneOf, the most relevant error is the one under the matching `type`.
            best = min(errors, key=lambda e: len(list(e.path)))
            print(f"event {i} ({event.get('type')!r}) fails {name}: {best.message}\n  {line.strip()[:400]}")
    if failed:
        return 1
    print(f"ok {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
