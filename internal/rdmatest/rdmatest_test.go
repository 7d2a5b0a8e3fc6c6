package rdmatest

import (
	"os"
	"testing"
)

// TestRequireProbe is what the lab's self-test runs in a guest without
// devices: under RNET_REQUIRE_RDMA=1 it must fail. Elsewhere it reports the
// pair it was given, or skips.
func TestRequireProbe(t *testing.T) {
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
