"""Analysis half of run.sh: the fit calibrate made of the probe, then each
run re-priced with it (bitlab recost --network-file) beside the median time
measured inside MPI per step (transport.csv's mpi_comm_s_rank0)."""
import subprocess
import sys
from pathlib import Path

import pandas as pd

bitlab, out = sys.argv[1], Path(sys.argv[2])
BOUND = 0.25  # the bound this check asks of the model: +-25 %

print((out / "calibrate.txt").read_text().split("\n\n")[0])
load = (out / "loadavg.txt").read_text().split("\n")
print(f"load average (1, 5, 15 min) at the start: {load[0]}; at the end: {load[1]}")
print()
print("Prediction vs measurement (median over the steps of the last phase from step 11)")
print(f"{'run':>18} {'phase':>10} {'bytes/worker':>13} {'model ms':>9} {'measured ms':>12} "
      f"{'p10-p25 ms':>14} {'measured/model':>15}")
misses = 0
for run in ("onebit_adam-h1024", "onebit_adam-h4096", "loco-h1024", "loco-h4096",
            "adam-h1024", "adam-h4096"):
    subprocess.run([bitlab, "recost", str(out / run), "--network-file", str(out / "fit.json"),
                    "--label", "probe", "--force"], check=True, capture_output=True)
    m = pd.read_csv(out / run / "metrics.csv")
    t = pd.read_csv(out / run / "transport.csv")
    phase = m.phase.iloc[-1]
    sel = (m.step >= 11) & (m.phase == phase)
    model = m.loc[sel, "comm_s@probe"].median()
    steps = t.loc[sel.values, "mpi_comm_s_rank0"]
    meas = steps.median()
    low = f"{steps.quantile(0.1) * 1e3:.4f}-{steps.quantile(0.25) * 1e3:.4f}"
    ratio = meas / model
    within = abs(ratio - 1) <= BOUND
    misses += not within and not run.startswith("adam")
    print(f"{run:>18} {phase:>10} {m.loc[sel, 'bytes_sent'].median():13.0f} {model * 1e3:9.4f} "
          f"{meas * 1e3:12.4f} {low:>14} {ratio:15.2f}  {'within' if within else 'MISSES'} +-25 %")
print(f"\n1-bit Adam and LoCo runs outside +-25 %: {misses} of 4")
