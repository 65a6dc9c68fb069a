"""libCacheSim's CSV reader over an MSR Cambridge CSV: the peer of `tierlab
trace stats` (issue 21; docs/benchmarks.md).

    .venv/bin/python scripts/libcachesim_msr_csv.py read|distinct TRACE.csv

`read` times Reader.get_num_of_req(): libCacheSim's C loop reading and
parsing every line (read_one_req), nothing else. `distinct` times
cal_working_set_size(reader): the same loop plus a GLib hash set of the
object ids (here the offsets); libCacheSim samples it for files over 1 GiB.
Columns: 1 time, 5 offset (the object id), 6 size; no header. Only the C
call is timed. Prints one JSON line: {"wall_s", "cpu_s", "count"} (records
read, or distinct offsets). tierlab_experiments::bench runs this file's
text with `python -c`.
"""
import json, resource, sys, time
import libcachesim as lcs
from libcachesim.libcachesim_python import Reader, cal_working_set_size
if len(sys.argv) != 3 or sys.argv[1] not in ("read", "distinct"):
    sys.exit("usage: libcachesim_msr_csv.py read|distinct TRACE.csv")
mode, path = sys.argv[1], sys.argv[2]
params = lcs.ReaderInitParam(has_header=False, has_header_set=True, delimiter=",")
params.time_field, params.obj_id_field, params.obj_size_field = 1, 5, 6
reader = Reader(path, lcs.TraceType.CSV_TRACE, params)
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
if mode == "read":
    count = reader.get_num_of_req()
else:
    count, _wss_bytes = cal_working_set_size(reader)
t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(json.dumps({"wall_s": t1 - t0, "cpu_s": cpu, "count": count}))
