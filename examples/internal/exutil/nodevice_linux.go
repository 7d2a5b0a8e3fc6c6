//go:build linux && cgo

package exutil

import (
	"errors"

	"github.com/rnet-dev/rnet/rnet"
)

func noRDMA(err error) bool { return errors.Is(err, rnet.ErrNoDevice) }
