//go:build !linux

package bench

import "errors"

var errNoAffinity = errors.New("CPU affinity is set on Linux only")

func allowedCPUs() ([]int, error) { return nil, errNoAffinity }

func pinProcess(...int) (func() error, error) { return nil, errNoAffinity }
