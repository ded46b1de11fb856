// Package benchdata generates large inputs for tests and the bench script.
package benchdata

import (
	"bytes"
	"fmt"
)

// BigPlan returns plan JSON (format 1.2) with n AWS-shaped resource changes:
// instances, volumes, buckets and security groups, some breaking the default
// policies and some with values unknown until apply. Tests and the bench use
// it for large-plan behaviour.
func BigPlan(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"format_version":"1.2","terraform_version":"1.11.4","resource_changes":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, `{"address":"aws_instance.web[%d]","mode":"managed","type":"aws_instance","name":"web","index":%d,"provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["create"],"before":null,"after":{"ami":"ami-0abc%d","instance_type":"t3.micro","tags":{"owner":"team-a"},"tags_all":{"owner":"team-a"},"root_block_device":[{"encrypted":true,"volume_size":20}]},"after_unknown":{"id":true,"arn":true,"private_ip":true},"before_sensitive":false,"after_sensitive":{}}}`, i, i, i%7)
		case 1:
			fmt.Fprintf(&b, `{"address":"aws_ebs_volume.data[%d]","mode":"managed","type":"aws_ebs_volume","name":"data","index":%d,"provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["create"],"before":null,"after":{"size":100,"tags":{"owner":"team-a"},"tags_all":{"owner":"team-a"}},"after_unknown":{"id":true,"encrypted":true},"before_sensitive":false,"after_sensitive":{}}}`, i, i)
		case 2:
			fmt.Fprintf(&b, `{"address":"aws_s3_bucket.b[%d]","mode":"managed","type":"aws_s3_bucket","name":"b","index":%d,"provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["update"],"before":{"bucket":"b-%d","tags":{}},"after":{"bucket":"b-%d","tags":{"env":"prod"},"tags_all":{"env":"prod"}},"after_unknown":{},"before_sensitive":{},"after_sensitive":{}}}`, i, i, i, i)
		case 3:
			fmt.Fprintf(&b, `{"address":"aws_security_group.sg[%d]","mode":"managed","type":"aws_security_group","name":"sg","index":%d,"provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["create"],"before":null,"after":{"name":"sg-%d","ingress":[{"cidr_blocks":["10.0.0.0/8"],"ipv6_cidr_blocks":[],"from_port":443,"to_port":443,"protocol":"tcp"}],"tags":{"owner":"team-a"},"tags_all":{"owner":"team-a"}},"after_unknown":{"id":true,"arn":true},"before_sensitive":false,"after_sensitive":{}}}`, i, i, i)
		}
	}
	b.WriteString(`]}`)
	return b.Bytes()
}
