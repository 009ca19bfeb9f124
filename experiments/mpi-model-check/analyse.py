"""Analysis half of run.sh: the fits calibrate made of the probes (one per
model size), then each run re-priced with its size's fit (bitlab recost
--network-file) beside the median time measured inside MPI per step
(transport.csv's mpi_comm_s_rank0: the transfers, after a barrier)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

bitlab, out = sys.argv[1], Path(sys.argv[2])
BOUND = 0.25  # the bound this check asks of the model: +-25 %
SIZES = (1024, 4096)



def probe_direct_s(probe, records):
    """The probe's own times (no model) for one step's records: each
    collective's time at its size, interpolated log-log between the probe's
    doubling sizes. bitlab's MPI allreduce is an all-to-all and an allgather
    of the buffer (sim/comm/comm.hpp exact_mean), so both are summed."""
    rows = [r for r in probe["results"] if not r["compressed"]]

    def at(collective, size):
        pts = sorted((r["bytes"], r["time_us"]) for r in rows if r["collective"] == collective)
        x, y = np.log([b for b, _ in pts]), np.log([t for _, t in pts])
        return float(np.exp(np.interp(np.log(size), x, y))) * 1e-6

    total = 0.0
    for _, r in records.iterrows():
        ops = ["alltoall", "allgather"] if r.op == "allreduce" else [r.op]
        total += sum(at(op, r.payload_bytes) for op in ops)
    return total


for h in SIZES:
    print(f"h {h}: " + (out / f"calibrate-h{h}.txt").read_text().split("\n\n")[0])
    print("  " + [line for line in (out / f"calibrate-h{h}.txt").read_text().splitlines()
                  if line.strip().startswith("rms")][0].strip())
load = (out / "loadavg.txt").read_text().split("\n")
print(f"load average (1, 5, 15 min) at the start: {load[0]}; at the end: {load[1]}")
print()
print("Prediction vs measurement (median over the steps of the last phase from step 11)")
print("(probe ms: the probe's own times at the step's message sizes, no model)")
print(f"{'run':>18} {'phase':>10} {'bytes/worker':>13} {'model ms':>9} {'probe ms':>9} "
      f"{'measured ms':>12} {'p10-p25 ms':>14} {'wait ms':>8} {'measured/model':>15}")
misses = 0
for h in SIZES:
    for opt in ("onebit_adam", "loco", "adam"):
        run = f"{opt}-h{h}"
        subprocess.run([bitlab, "recost", str(out / run), "--network-file",
                        str(out / f"fit-h{h}.json"), "--label", "probe", "--force"],
                       check=True, capture_output=True)
        m = pd.read_csv(out / run / "metrics.csv")
        t = pd.read_csv(out / run / "transport.csv")
        phase = m.phase.iloc[-1]
        sel = (m.step >= 11) & (m.phase == phase)
        model = m.loc[sel, "comm_s@probe"].median()
        steps = t.loc[sel.values, "mpi_comm_s_rank0"]
        meas = steps.median()
        wait = t.loc[sel.values, "mpi_wait_s_rank0"].median()
        low = f"{steps.quantile(0.1) * 1e3:.4f}-{steps.quantile(0.25) * 1e3:.4f}"
        log = pd.read_csv(out / run / "comm_log.csv")
        probe = json.loads((out / f"probe-h{h}.json").read_text())
        direct = probe_direct_s(probe, log[log.step == m.step[sel].iloc[-1]])
        ratio = meas / model
        within = abs(ratio - 1) <= BOUND
        misses += not within and opt != "adam"
        print(f"{run:>18} {phase:>10} {m.loc[sel, 'bytes_sent'].median():13.0f} "
              f"{model * 1e3:9.4f} {direct * 1e3:9.4f} {meas * 1e3:12.4f} {low:>14} {wait * 1e3:8.4f} "
              f"{ratio:15.2f}  "
              f"{'within' if within else 'MISSES'} +-25 %")
print(f"\n1-bit Adam and LoCo runs outside +-25 %: {misses} of 4")
sys.exit(0)
