// Package netmesh will carry goshmem's remote path: an authenticated full
// mesh of TCP connections between PEs on different hosts, with PUT,
// GET, atomic, put-with-signal, flush, heartbeat and goodbye frames
// applied straight into the receiving PE's heap. It is not built yet;
// until it is, PEs on different hosts refuse to start (see shmem.Init).
// netmesh never imports shmem.
package netmesh
