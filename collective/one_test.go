package collective

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

func TestHistoTCP(t *testing.T) {
	np, _ := strconv.Atoi(os.Getenv("NP"))
	if np == 0 {
		t.Skip()
	}
	elems, _ := strconv.Atoi(os.Getenv("ELEMS"))
	var ds []time.Duration
	shmem.Run(np, func(pe *shmem.PE) error {
		s, _ := shmem.Malloc[float64](pe, elems)
		d, _ := shmem.Malloc[float64](pe, elems*np)
		for range 300 {
			t0 := time.Now()
			if err := AllReduce(pe.World(), d.Slice(0, elems), s, Sum); err != nil {
				return err
			}
			if pe.MyPE() == 0 {
				ds = append(ds, time.Since(t0))
			}
		}
		return nil
	}, shmem.WithHeapSize(64<<20), shmem.WithHosts(scenarioHosts(np)))
	slices.Sort(ds)
	fmt.Println("allreduce tcp p10", ds[len(ds)/10], "p50", ds[len(ds)/2], "p90", ds[len(ds)*9/10])
}

func scenarioHosts(n int) []string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprint("h", i)
	}
	return h
}
