#!/usr/bin/env python3
"""Installed footprint of a guest agent's package on a Debian minbase (issue #17's server-package target).

The footprint is the package's Installed-Size plus that of every package its Depends and Pre-Depends pull in that a
minbase does not already have. The minbase is what `debootstrap --variant=minbase` installs: every package of
Priority "required", apt, and what they depend on. Sizes are the packages' Installed-Size fields (kB, as dpkg
counts them: each file rounded up to 1 KiB), read from apt's lists (`apt-cache dumpavail`: one record per package,
the newest available) and, for a local .deb, from its control file. A dependency group takes the first
alternative that exists (as apt does when nothing is installed yet), a virtual package its first provider; a
group that something already chosen satisfies adds nothing.

    python3 bench/qga/footprint.py --deb target/debian/guestlinkd_<v>_amd64.deb [--reference qemu-guest-agent]

prints both packages' footprints, what each adds to a minbase, and the ratio. `bench/qga/run.py` runs the same as
its `footprint` phase.
"""

import argparse
import re
import subprocess
import sys


def parse_stanzas(text):
    """Debian control stanzas (`Field: value`, continuation lines folded) as a list of dicts."""
    out, cur, key = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if cur:
                out.append(cur)
            cur, key = {}, None
        elif line[0] in " \t":
            if key:
                cur[key] += " " + line.strip()
        else:
            key, _, value = line.partition(":")
            cur[key] = value.strip()
    if cur:
        out.append(cur)
    return out


def parse_deps(field):
    """`a (>= 1) | b:any, c` → [["a", "b"], ["c"]]: groups of alternatives, bare names."""
    groups = []
    for group in filter(None, (g.strip() for g in (field or "").split(","))):
        alts = [re.split(r"[\s(:\[]", alt.strip(), maxsplit=1)[0] for alt in group.split("|")]
        groups.append([a for a in alts if a])
    return groups


def dependencies(control):
    """A package's Pre-Depends and Depends groups (what installing it pulls in)."""
    return parse_deps(control.get("Pre-Depends")) + parse_deps(control.get("Depends"))


class Archive:
    """The packages apt knows, with their sizes, dependencies and what they provide."""

    def __init__(self, stanzas):
        self.pkgs = {s["Package"]: s for s in stanzas if "Package" in s}
        self.providers = {}
        for name, s in self.pkgs.items():
            for virtual in parse_deps(s.get("Provides")):
                self.providers.setdefault(virtual[0], []).append(name)

    @classmethod
    def from_apt(cls):
        text = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True, text=True).stdout
        archive = cls(parse_stanzas(text))
        if not archive.pkgs:
            sys.exit("apt knows no packages: run apt-get update first")
        return archive

    def size_kb(self, name):
        return int(self.pkgs[name].get("Installed-Size", 0))

    def depends(self, name):
        return dependencies(self.pkgs[name])

    def _satisfied(self, alt, have):
        return alt in have or any(p in have for p in self.providers.get(alt, ()))

    def _choose(self, group):
        for alt in group:
            if alt in self.pkgs:
                return alt
        for alt in group:
            if self.providers.get(alt):
                return self.providers[alt][0]
        return None

    def pull(self, groups, have):
        """The packages that dependency `groups` add to the set `have` (recursively); `have` is not changed."""
        have, added, todo = set(have), [], list(groups)
        while todo:
            group = todo.pop(0)
            if any(self._satisfied(alt, have) for alt in group):
                continue
            name = self._choose(group)
            if name is None:
                raise SystemExit(f"no package satisfies the dependency {' | '.join(group)}")
            have.add(name)
            added.append(name)
            todo.extend(self.depends(name))
        return added

    def minbase(self):
        """What `debootstrap --variant=minbase` installs: Priority required, apt, and their dependencies."""
        roots = {n for n, s in self.pkgs.items() if s.get("Priority") == "required"} | {"apt"}
        groups = [d for n in sorted(roots) for d in self.depends(n)]
        return roots | set(self.pull(groups, roots))


def deb_control(path):
    """The control fields of a local .deb."""
    text = subprocess.run(["dpkg-deb", "-f", path], check=True, capture_output=True, text=True).stdout
    return parse_stanzas(text)[0]


def footprint(archive, base, control):
    """`control`'s package on top of `base`: its own size, what it adds, and the total, all in kB."""
    added = archive.pull(dependencies(control), base | {control["Package"]})
    own = int(control.get("Installed-Size", 0))
    adds = {n: archive.size_kb(n) for n in added}
    return {"package": control["Package"], "version": control.get("Version", ""), "installed_kb": own,
            "adds_kb": adds, "footprint_kb": own + sum(adds.values())}


def measure(deb, reference="qemu-guest-agent"):
    """(our package's footprint, the reference's), both on the same minbase."""
    archive = Archive.from_apt()
    if reference not in archive.pkgs:
        sys.exit(f"apt knows no package {reference}")
    base = archive.minbase()
    return footprint(archive, base, deb_control(deb)), footprint(archive, base, archive.pkgs[reference])


def describe(fp):
    adds = ", ".join(f"{n} {kb:,}" for n, kb in fp["adds_kb"].items()) or "nothing"
    return (f"{fp['package']} {fp['version']}: {fp['installed_kb']:,} kB installed + adds to a minbase: {adds} "
            f"= {fp['footprint_kb']:,} kB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deb", required=True, help="the server package (.deb), e.g. from packaging/build-debs")
    ap.add_argument("--reference", default="qemu-guest-agent", help="the package to compare with (apt's lists)")
    args = ap.parse_args()
    ours, ref = measure(args.deb, args.reference)
    print(describe(ours))
    print(describe(ref))
    print(f"ratio {ours['footprint_kb'] / ref['footprint_kb']:.2f}× (target ≤ 1×)")


if __name__ == "__main__":
    main()
