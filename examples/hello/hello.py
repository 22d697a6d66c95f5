"""Print what kiln hands a task: its rank in the gang and its devices."""
import os
import socket

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
simulated = " (simulated)" if os.environ.get("KILN_SIMULATED_GPUS") else ""
print(f"hello from rank {rank} of {world} on {socket.gethostname()}: "
      f"CUDA_VISIBLE_DEVICES={devices}{simulated}, "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, "
      f"job {os.environ['KILN_JOB_ID']} attempt {os.environ['KILN_ATTEMPT']}",
      flush=True)
