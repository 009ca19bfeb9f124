"""Analysis half of run.sh: medians of the measured MPI time per step, the
least-squares fit of the model's link (latency, bandwidth) on the exact
allreduces, and the compressed runs re-priced with the fitted link."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

bitlab, out = sys.argv[1], Path(sys.argv[2])


def steps(run, phases):
    """transport.csv joined with metrics.csv's phase, steps 5.. of the given phases."""
    t = pd.read_csv(out / run / "transport.csv")
    m = pd.read_csv(out / run / "metrics.csv")
    t["phase"] = m["phase"]
    return t[(t.step >= 5) & t.phase.isin(phases)]


# 1. Exact fp32 allreduce on 2 ranks, logged as a ring: the model's time is
#    2(p-1)α + 2(p-1)/p · S/B = 2α + S/B with S the bytes one worker sends.
rows = []
for h in (64, 256, 1024, 4096):
    t = steps(f"adam-h{h}", {"full"})
    rows.append((t.model_bytes_per_worker.median(), t.mpi_comm_s_rank0.median()))
sizes, measured = np.array(rows).T
# Relative least squares (rows divided by the measurement): the sizes span
# 64x, and a plain fit would serve the largest alone.
a = np.column_stack([np.full_like(sizes, 2.0), sizes]) / measured[:, None]
(alpha_s, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(measured), rcond=None)
alpha_us = max(alpha_s * 1e6, 0.01)  # the model needs a latency > 0
if inv_bw <= 0:
    sys.exit("analyse.py: the fit gave a non-positive bandwidth; the measurements are too noisy")
bw_gbps = 8.0 / inv_bw / 1e9
print("Calibration: exact fp32 allreduce (Adam), 2 ranks, median over steps 5-200")
print(f"{'bytes/worker':>14} {'measured ms':>12} {'fitted ms':>10}")
for s, m in zip(sizes, measured):
    fit = 2 * alpha_s + s * inv_bw
    print(f"{s:14.0f} {m * 1e3:12.4f} {fit * 1e3:10.4f}")
print(f"fitted link: latency {alpha_s * 1e6:.2f} us (used: {alpha_us:.2f}), "
      f"bandwidth {bw_gbps:.1f} Gbit/s\n")

# 2. The compressed runs re-priced with the fitted link.
print("Prediction vs measurement (compressed phase, median over its steps)")
print(f"{'run':>18} {'phase':>8} {'bytes/worker':>13} {'model ms':>9} {'measured ms':>12} "
      f"{'ratio':>6}")
for run in ("onebit_adam-h1024", "onebit_adam-h4096", "loco-h1024", "loco-h4096"):
    subprocess.run([bitlab, "recost", str(out / run),
                    "--set", f"network.intra_latency_us={alpha_us}",
                    "--set", f"network.intra_bandwidth_gbps={bw_gbps}",
                    "--label", "fitted", "--force"], check=True, capture_output=True)
    m = pd.read_csv(out / run / "metrics.csv")
    t = pd.read_csv(out / run / "transport.csv")
    phase = m.phase.iloc[-1]
    sel = (m.step >= 11) & (m.phase == phase)
    model = m.loc[sel, "comm_s@fitted"].median()
    meas = t.loc[sel.values, "mpi_comm_s_rank0"].median()
    print(f"{run:>18} {phase:>8} {m.loc[sel, 'bytes_sent'].median():13.0f} {model * 1e3:9.4f} "
          f"{meas * 1e3:12.4f} {meas / model:6.2f}")
