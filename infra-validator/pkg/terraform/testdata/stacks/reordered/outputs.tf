output "replicas" {
  value = 3
}

output "database" {
  value = terraform_data.database.output
}
