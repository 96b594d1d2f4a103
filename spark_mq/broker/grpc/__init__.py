"""RocketMQ 5's gRPC endpoint (``apache.rocketmq.v2.MessagingService``) inside the broker process."""
