// Package ring will hold messaging over the symmetric heap: directed
// lanes of fixed-size, CRC32C-guarded slots in the receiver's heap with
// cumulative acknowledgements. It is built from the shmem API only.
// Not built yet.
package ring
