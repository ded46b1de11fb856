package v1alpha1

// The accessors below are what the operator acts on for a change: what it
// applies, where and how. They read only the approved ChangeRequest (and,
// for a Delete, the namespace the Release last applied to), never a
// Release's spec, which every push rewrites before anything is approved
// (DESIGN.md §9.8).

// SourceOf is the source a change acts on: an Apply change's spec.source;
// for a Delete change, what was applied (spec.deletion.source), or its own
// spec.source when the deletion records none. Nil when the change records
// no source (a syncer older than the field made it): such a change is
// refused and must be re-planned.
func (c *ChangeRequest) SourceOf() *ChangeSource {
	if c.IsDelete() && c.Spec.Deletion != nil && c.Spec.Deletion.Source != nil {
		return c.Spec.Deletion.Source
	}
	return c.Spec.Source
}

// StackOf is the Terraform stack a change acts on: for a Delete change the
// stack its destroy plan was made for (spec.deletion.terraform), otherwise
// the stack of SourceOf. Nil when there is none.
func (c *ChangeRequest) StackOf() *TerraformSource {
	if c.IsDelete() && c.Spec.Deletion != nil && c.Spec.Deletion.Terraform != nil {
		return c.Spec.Deletion.Terraform
	}
	if s := c.SourceOf(); s != nil {
		return s.Terraform
	}
	return nil
}

// DeliveryOf is the delivery that carries a change out: for a Delete
// change how the removed release was delivered (spec.deletion.delivery),
// otherwise spec.delivery; helm when unset.
func (c *ChangeRequest) DeliveryOf() Delivery {
	if c.IsDelete() && c.Spec.Deletion != nil && c.Spec.Deletion.Delivery != "" {
		return c.Spec.Deletion.Delivery
	}
	return c.Delivery()
}

// NamespaceOf is the target namespace a change acts in: an Apply change's
// spec.targetNamespace; for a Delete change the namespace the workload was
// applied to (spec.deletion.targetNamespace), else applied (the Release's
// status.appliedTargetNamespace), else spec.targetNamespace (a release
// never applied has nothing in any namespace).
func (c *ChangeRequest) NamespaceOf(applied string) string {
	if !c.IsDelete() {
		return c.Spec.TargetNamespace
	}
	if c.Spec.Deletion != nil && c.Spec.Deletion.TargetNamespace != "" {
		return c.Spec.Deletion.TargetNamespace
	}
	if applied != "" {
		return applied
	}
	return c.Spec.TargetNamespace
}
