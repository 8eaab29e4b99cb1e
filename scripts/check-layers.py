#!/usr/bin/env python3
"""The layer rule, checked from `cargo metadata`: a crate's normal dependencies among the
workspace's crates are only crates of lower layers (ARCHITECTURE.md's codemap), and no product
crate depends on a lab crate (test oracle, simulation harness, peer benchmarks) except where
listed below with the reason. Dev-dependencies (tests) may use anything."""
import json
import subprocess
import sys

# Layer of each crate: a crate may depend on crates of a strictly lower layer.
LAYERS = {
    "fsoc-flash": 0,   # the flash seam: Flash trait, addresses, codec, CRC, lock (no_std)
    "fsoc-9p": 0,      # the 9P2000.L wire codec (no_std, no heap); depends on none of ours
    "fsoc-media": 1,   # NAND simulator (implements Flash)
    "fsoc-mtd": 1,     # Linux MTD raw NAND backend (implements Flash)
    "fsoc-array": 2,   # chips in parallel
    "fsoc-core": 3,    # segment log, B+trees, transactions, file system (one no_std crate)
    "fsoc-model": 3,   # lab: the POSIX model (uses only fsoc-media's seeded generator)
    "fsoc-sim": 4,     # lab: crash workloads over fsoc-core, compared as fsoc-model listings
    "fsoc-bench": 8,   # lab: peer benchmarks over fsoc-core and fsoc-array, seed 000's
                       # comparison over fsoc-serve and fsoc-client (the service against raw pages),
                       # and the FUSE benchmark (fsoc-fuse's mount-point check; it drives `fsoc mount`)
    "fsoc-engine": 6,  # one volume shared by request threads (lock, panics, clock, commits)
    "fsoc-fuse": 7,    # FUSE mount over fsoc-engine
    "fsoc-serve": 7,   # 9P2000.L server over fsoc-engine and fsoc-9p
    "fsoc-client": 7,  # the host's 9P2000.L client of fsoc serve, over fsoc-9p (std::fs-like API)
    "fsoc-client-c": 8,  # fsoc-client behind a C ABI (header by cbindgen) for C programs on a host
    "fsoc-cli": 9,     # the command
    "fsoc-fuzz-targets": 8,  # lab: one fuzz entry point per decoder of flash or wire bytes, up to
                             # fsoc-serve's raw protocol (fuzz/ drives them; tests replay corpora)
}
LAB = {"fsoc-model", "fsoc-sim", "fsoc-bench", "fsoc-fuzz-targets"}
# The core reaches flash through the seam only, never through a backend (the simulator).
CORE_MAY_USE = {"fsoc-core": {"fsoc-flash"}}
# Product crates that may use a lab crate, and how.
ALLOWED_LAB = {
    # `fsoc crashtest` is a user-facing command (power cuts at every operation of a workload).
    ("fsoc-cli", "fsoc-sim"): "always",
    # The peer benchmarks only with the `lab` feature (littlefs needs libclang).
    ("fsoc-cli", "fsoc-bench"): "optional",
}

metadata = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--no-deps"], check=True, capture_output=True, text=True).stdout)
problems = []
for package in metadata["packages"]:
    name = package["name"]
    if name not in LAYERS:
        problems.append(f"{name}: not in the layer table of scripts/check-layers.py (add it with its layer)")
        continue
    for dependency in package["dependencies"]:
        target = dependency["name"]
        if dependency["kind"] is not None or target not in LAYERS:
            continue
        if LAYERS[target] >= LAYERS[name]:
            problems.append(f"{name} (layer {LAYERS[name]}) depends on {target} (layer {LAYERS[target]}): not below it")
        if target in LAB and name not in LAB:
            allowed = ALLOWED_LAB.get((name, target))
            if allowed is None or (allowed == "optional" and not dependency["optional"]):
                problems.append(f"product crate {name} depends on lab crate {target}")
for package in metadata["packages"]:
    allowed = CORE_MAY_USE.get(package["name"])
    if allowed is None:
        continue
    used = {d["name"] for d in package["dependencies"] if d["kind"] is None and d["name"] in LAYERS}
    for extra in sorted(used - allowed):
        problems.append(f"{package['name']} depends on {extra}: it may use only {sorted(allowed)}")
if problems:
    print("layer rule broken:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"layer rule holds for {len(metadata['packages'])} crates")
