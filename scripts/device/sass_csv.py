"""ncu's per-SASS source counters (`ncu -i R --page source --print-source sass --csv`, gzipped or
not) as rows: shared by sass_stalls.py and sass_phases.py."""
import collections
import csv
import gzip


def load(path):
    """(header, sections): sections maps each kernel's name to its rows (dicts by column) in address
    order, one per address; a kernel's section that ncu prints twice is read once."""
    rows = csv.reader((gzip.open if path.endswith(".gz") else open)(path, "rt"))
    hdr, sections, key = None, collections.OrderedDict(), None
    for r in rows:
        if r and r[0] == "Kernel Name":
            key = r[1]
            if key in sections:  # the same kernel again: skip its rows
                key = None
            else:
                sections[key] = collections.OrderedDict()
        elif r and r[0] == "Address":
            hdr = r
        elif hdr and key and len(r) == len(hdr):
            d = dict(zip(hdr, r))
            sections[key][d["Address"]] = d  # a kernel's rows may repeat: one per address
    return hdr, collections.OrderedDict((k, list(m.values())) for k, m in sections.items())


def num(d, column):
    return int(d.get(column) or 0)


def stall_columns(hdr):
    return [c for c in hdr if c.startswith("stall_") and "Not Issued" not in c]
