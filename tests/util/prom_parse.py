#!/usr/bin/env python3
"""Parse Prometheus text exposition (stdin) with prometheus_client's own
parser and print what it understood as JSON, for C tests to check:
{"families": [{"name", "type", "documentation",
               "samples": [{"name", "labels", "value"}]}]}
Values are written as strings ("+Inf", "1.0"...) so nothing is lost.
Exit 2 with a message on stderr when the text does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    out = []
    try:
        for fam in text_string_to_metric_families(text):
            out.append({
                "name": fam.name,
                "type": fam.type,
                "documentation": fam.documentation,
                "samples": [{"name": s.name, "labels": dict(s.labels), "value": repr(float(s.value))}
                            for s in fam.samples],
            })
    except Exception as e:  # the parser raises ValueError and others
        print("prom_parse: the text does not parse: %r" % (e,), file=sys.stderr)
        return 2
    json.dump({"families": out}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
