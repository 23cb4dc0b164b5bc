package main

import (
	"fmt"
)

// The network configuration: host-local's, plus the phase and, here by
// default, the checkpoint.
func Example_networkConfiguration() {
	c, err := loadConfig([]byte(`{
		"cniVersion": "1.1.0",
		"name": "mynet",
		"type": "bridge",
		"ipam": {
			"type": "phaseshift-host-local",
			"ranges": [[{"subnet": "10.22.0.0/16"}], [{"subnet": "fd00:22::/64", "rangeStart": "fd00:22::100"}]],
			"phase": "expand"
		}
	}`), "IgnoreUnknown=1;K8S_POD_NAME=web-0")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("phase:", int(c.phase), c.phase)
	fmt.Println("host-local's files:", c.dataDir+"/"+c.network)
	fmt.Println("checkpoint:", c.checkpoint)
	for i, s := range c.ranges {
		fmt.Printf("range set %d: %s (gateway %s)\n", i, s, s[0].gateway)
	}
	// Output:
	// phase: 1 expand
	// host-local's files: /var/lib/cni/networks/mynet
	// checkpoint: /var/lib/cni/networks/.phaseshift/mynet.json
	// range set 0: 10.22.0.1-10.22.255.254 (gateway 10.22.0.1)
	// range set 1: fd00:22::100-fd00:22::ffff:ffff:ffff:ffff (gateway fd00:22::1)
}
