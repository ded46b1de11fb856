module github.com/sluice-gitops/sluice/infra-validator

go 1.26.8

replace github.com/sluice-gitops/sluice/policies => ../policies
