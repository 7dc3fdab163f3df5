package suite

import (
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// A figure's warm-up runs at least the iterations its suite asks for
// (figure.warm), even when the time-based warm-up would stop sooner,
// and no more than the time-based one otherwise.
func TestCalibrateWarm(t *testing.T) {
	err := shmem.Run(1, func(pe *shmem.PE) error {
		xch, err := shmem.Malloc[int64](pe, 3*1+1)
		if err != nil {
			return err
		}
		// A repetition time this short is spent by one iteration.
		b := &B{pe: pe, cfg: Config{RepTime: time.Nanosecond}, npes: 1, xch: xch}
		for _, warm := range []int{0, 1, 5, 33, 100} {
			ran := 0
			fn := func(n int) (sample, error) {
				ran += n
				time.Sleep(time.Microsecond)
				return sample{ns: float64(n) * 1000, ops: float64(n)}, nil
			}
			if _, err := b.calibrate(fn, false, warm); err != nil {
				return err
			}
			if want := max(warm, 1); ran != want {
				t.Errorf("warm %d: the warm-up ran %d iterations, want %d", warm, ran, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
