"""The ``bedrock`` protocol: AWS Bedrock's Converse and InvokeModel APIs."""
