module github.com/sluice-gitops/sluice/gitops-syncer

go 1.26.8

replace github.com/sluice-gitops/sluice/operator/api => ../operator/api

replace github.com/sluice-gitops/sluice/infra-validator => ../infra-validator

replace github.com/sluice-gitops/sluice/policies => ../policies
