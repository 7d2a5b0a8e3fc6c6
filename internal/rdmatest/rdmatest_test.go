package rdmatest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRequireProbe is what the lab's self-test runs in a guest without
// devices: under RNET_REQUIRE_RDMA=1 it must fail. Elsewhere it reports the
// pair it was given, or skips. It is the self-test's, not the device
// tier's, so it is not recorded as a device test.
func TestRequireProbe(t *testing.T) {
	t.Setenv("RNET_DEVICE_TESTS", "")
	p := Require(t)
	if !p.Server.IsValid() || !p.Client.IsValid() {
		t.Fatalf("Require returned an invalid pair %+v", p)
	}
}

func TestRequireParsesAddresses(t *testing.T) {
	t.Setenv("RNET_TEST_SERVER", "10.77.0.2")
	t.Setenv("RNET_TEST_CLIENT", "10.77.0.1")
	p := Require(t)
	if p.Server.String() != "10.77.0.2" || p.Client.String() != "10.77.0.1" {
		t.Fatalf("Require = %+v", p)
	}
}

func TestRequiredFlag(t *testing.T) {
	t.Setenv("RNET_REQUIRE_RDMA", "1")
	if !Required() {
		t.Fatal("Required() is false under RNET_REQUIRE_RDMA=1")
	}
	os.Unsetenv("RNET_REQUIRE_RDMA")
	if Required() {
		t.Fatal("Required() is true without RNET_REQUIRE_RDMA")
	}
}

// A test that skips for want of a device is written to RNET_DEVICE_TESTS's
// file under its top-level name and package directory.
func TestRequireRecordsTheSkippingTest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "device-tests")
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("RNET_DEVICE_TESTS", file)
	t.Setenv("RNET_TEST_SERVER", "")
	t.Setenv("RNET_TEST_CLIENT", "")
	t.Setenv("RNET_REQUIRE_RDMA", "")
	t.Run("sub", func(t *testing.T) {
		Require(t)
		t.Error("Require did not skip without addresses")
	})
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := dir + "\t" + t.Name() + "\n"; string(got) != want {
		t.Errorf("RNET_DEVICE_TESTS file holds %q, want %q", got, want)
	}
}
