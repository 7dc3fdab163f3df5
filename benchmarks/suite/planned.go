package suite

// Suites whose runtime code is being built elsewhere. Each entry keeps
// its place in the registry and is reported as not available; when its
// package lands, replace Missing with a Run (see Suite) in a file of its
// own, and the driver, the table, the JSON and the plots need nothing
// more.
func init() {
	const collective = "not available until package collective lands"
	for _, s := range []*Suite{
		{Name: "broadcast", Group: "collectives", Sized: true, Missing: collective,
			Doc: "osu_oshm_broadcast: root 0 broadcasts size bytes to all PEs; latency per call"},
		{Name: "reduce", Group: "collectives", Sized: true, Missing: collective,
			Doc: "osu_oshm_reduce: sum reduction of size bytes of int64 to all PEs; latency per call"},
		{Name: "allreduce", Group: "collectives", Sized: true, Missing: collective,
			Doc: "MPI-style allreduce (sum) of size bytes; latency per call"},
		{Name: "fcollect", Group: "collectives", Sized: true, Missing: collective,
			Doc: "osu_oshm_fcollect: every PE contributes size bytes; latency per call"},
		{Name: "alltoall", Group: "collectives", Sized: true, Missing: collective,
			Doc: "osu_oshm_alltoall: size bytes from every PE to every PE; latency per call"},
	} {
		s.Default = true
		Register(s)
	}
}
